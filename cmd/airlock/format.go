package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// commandString renders argv for a table, quoting arguments that a shell
// would split or interpret.
func commandString(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`|&;<>()*?[]#~") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

// truncate shortens s to at most n runes, ending with "…" if it cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ago renders the time since t: "Less than a second ago", "5 minutes ago".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	unit := func(n int, name string) string {
		if n == 1 {
			return fmt.Sprintf("1 %s ago", name)
		}
		return fmt.Sprintf("%d %ss ago", n, name)
	}
	switch {
	case d < time.Second:
		return "Less than a second ago"
	case d < time.Minute:
		return unit(int(d/time.Second), "second")
	case d < time.Hour:
		return unit(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int(d/time.Hour), "hour")
	case d < 14*24*time.Hour:
		return unit(int(d/(24*time.Hour)), "day")
	case d < 60*24*time.Hour:
		return unit(int(d/(7*24*time.Hour)), "week")
	case d < 2*365*24*time.Hour:
		return unit(int(d/(30*24*time.Hour)), "month")
	}
	return unit(int(d/(365*24*time.Hour)), "year")
}

// humanSize renders bytes in decimal units: "512B", "12.3MB".
func humanSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	i := -1
	for (f >= unit || (f >= unit-0.05 && i >= 0)) && i < 5 {
		f /= unit
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + string("kMGTPE"[i]) + "B"
}

// shortDigest keeps the algorithm and 12 hex digits of a digest.
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) <= 12 {
		return d
	}
	return alg + ":" + hex[:12]
}
