package fsscope

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// diffContext is the number of unchanged lines around a hunk.
const diffContext = 3

// maxEditDistance bounds the Myers search; beyond it, the differing middle
// of two files is shown as removed and added as a whole.
const maxEditDistance = 4000

// splitLines splits text into lines that keep their "\n".
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// editOp is one line of an edit script.
type editOp struct {
	kind byte // ' ', '-', '+'
	line string
}

// lineDiff returns an edit script turning a into b: shortest (Myers) for
// the part between their common prefix and suffix, unless that part needs
// more than maxEditDistance edits.
func lineDiff(a, b []string) []editOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []editOp
	for _, l := range a[:pre] {
		ops = append(ops, editOp{' ', l})
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, editOp{' ', l})
	}
	return ops
}

// myers is the greedy O((N+M)D) algorithm of Myers (1986), keeping each
// round's frontier to trace the path back.
func myers(a, b []string) []editOp {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return wholesale(a, b)
	}
	max := n + m
	if max > maxEditDistance {
		max = maxEditDistance
	}
	off := max + 1
	v := make([]int, 2*max+3)
	var trace [][]int
	found := false
	var d int
	for d = 0; d <= max; d++ {
		snap := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = true
			}
		}
		for k := -d; k <= d; k++ {
			snap[k+d] = v[off+k]
		}
		trace = append(trace, snap)
		if found {
			break
		}
	}
	if !found {
		return wholesale(a, b)
	}
	// Walk back from (n, m).
	var rev []editOp
	x, y := n, m
	for d := len(trace) - 1; d > 0; d-- {
		prev := trace[d-1]
		get := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || k != d && get(k-1) < get(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, editOp{' ', a[x]})
		}
		if x > px {
			x--
			rev = append(rev, editOp{'-', a[x]})
		} else {
			y--
			rev = append(rev, editOp{'+', b[y]})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, editOp{' ', a[x]})
	}
	ops := make([]editOp, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return ops
}

func wholesale(a, b []string) []editOp {
	ops := make([]editOp, 0, len(a)+len(b))
	for _, l := range a {
		ops = append(ops, editOp{'-', l})
	}
	for _, l := range b {
		ops = append(ops, editOp{'+', l})
	}
	return ops
}

// writeHunks writes the unified-diff hunks of an edit script.
func writeHunks(w io.Writer, ops []editOp) error {
	type pos struct{ a, b int } // 0-based line numbers before ops[i]
	at := make([]pos, len(ops)+1)
	for i, o := range ops {
		at[i+1] = at[i]
		if o.kind != '+' {
			at[i+1].a++
		}
		if o.kind != '-' {
			at[i+1].b++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-diffContext, 0)
		end := i
		// Extend while the next change is within 2*context lines.
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
				continue
			}
			if j-end >= 2*diffContext {
				break
			}
		}
		end = min(end+diffContext, len(ops))
		aStart, bStart := at[start].a, at[start].b
		aLen, bLen := at[end].a-aStart, at[end].b-bStart
		if _, err := fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen)); err != nil {
			return err
		}
		for _, o := range ops[start:end] {
			line := o.line
			nl := strings.HasSuffix(line, "\n")
			if _, err := io.WriteString(w, string(o.kind)+line); err != nil {
				return err
			}
			if !nl {
				if _, err := io.WriteString(w, "\n\\ No newline at end of file\n"); err != nil {
					return err
				}
			}
		}
		i = end
	}
	return nil
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// unifiedText writes the hunks turning old into new.
func unifiedText(w io.Writer, oldText, newText string) error {
	return writeHunks(w, lineDiff(splitLines(oldText), splitLines(newText)))
}

// diffName renders prefix+name for a header line of the unified diff
// ("a/workspace/x"), quoted as git quotes a name that needs it: a name
// with a control character (a newline would start a line of the
// sandbox's choosing), a double quote, a backslash, a character that is
// not printable (a bidi override, a zero-width or other format
// character, a line or paragraph separator) or bytes that are not UTF-8
// is written in double quotes with Go's escapes (strconv.Quote: \n, \t,
// \", \\, \x1b, \u202e), the prefix inside the quotes:
// "a/workspace/x\ny". Other names are written as they are.
func diffName(prefix, name string) string {
	s := prefix + name
	if needsQuote(s) {
		return strconv.Quote(s)
	}
	return s
}

// needsQuote reports whether s has a character diffName quotes.
func needsQuote(s string) bool {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return true
		case r == '"' || r == '\\':
			return true
		case !strconv.IsPrint(r):
			return true
		}
	}
	return false
}
