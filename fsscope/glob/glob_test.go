package glob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var matchTests = []struct {
	pattern string
	fold    bool
	path    string
	isDir   bool
	want    bool
}{
	// Basename patterns match at any depth.
	{pattern: "*.pem", path: "server.pem", want: true},
	{pattern: "*.pem", path: "a/b/server.pem", want: true},
	{pattern: "*.pem", path: ".hidden.pem", want: true},
	{pattern: "*.pem", path: "server.pem.bak", want: false},
	{pattern: "*.pem", path: "pem", want: false},
	{pattern: ".env*", path: ".env", want: true},
	{pattern: ".env*", path: "svc/.env.local", want: true},
	{pattern: ".env*", path: "x.env", want: false},
	{pattern: "id_rsa*", path: "home/.ssh/id_rsa.pub", want: true},
	// Anchored patterns.
	{pattern: "/top.txt", path: "top.txt", want: true},
	{pattern: "/top.txt", path: "a/top.txt", want: false},
	{pattern: "config/prod/*.yaml", path: "config/prod/db.yaml", want: true},
	{pattern: "config/prod/*.yaml", path: "x/config/prod/db.yaml", want: false},
	{pattern: "config/prod/*.yaml", path: "config/prod/sub/db.yaml", want: false},
	// "**".
	{pattern: "**/.env*", path: ".env", want: true},
	{pattern: "**/.env*", path: "a/b/.envrc", want: true},
	{pattern: "config/**", path: "config/a", want: true},
	{pattern: "config/**", path: "config/a/b/c", want: true},
	{pattern: "config/**", path: "config", isDir: true, want: false},
	{pattern: "a/**/b", path: "a/b", want: true},
	{pattern: "a/**/b", path: "a/x/y/b", want: true},
	{pattern: "a/**/b", path: "a/x/y/c", want: false},
	{pattern: "**", path: "anything/at/all", want: true},
	{pattern: "**/**/x", path: "x", want: true},
	{pattern: "a/**/**", path: "a", isDir: true, want: false},
	{pattern: "a/**/**", path: "a/b", want: true},
	{pattern: "a**b", path: "aXYb", want: true},
	{pattern: "a**b", path: "aX/Yb", want: false},
	// "?" and classes.
	{pattern: "file?.txt", path: "file1.txt", want: true},
	{pattern: "file?.txt", path: "file10.txt", want: false},
	{pattern: "file[0-9].txt", path: "d/file7.txt", want: true},
	{pattern: "file[!0-9].txt", path: "file7.txt", want: false},
	{pattern: "file[^0-9].txt", path: "fileA.txt", want: true},
	{pattern: "[]]", path: "]", want: true},
	{pattern: "[a-]", path: "-", want: true},
	{pattern: `\*`, path: "*", want: true},
	{pattern: `\*`, path: "x", want: false},
	// Directory-only patterns.
	{pattern: "build/", path: "build", isDir: true, want: true},
	{pattern: "build/", path: "build", isDir: false, want: false},
	// Path normalisation.
	{pattern: "a/b", path: "./a//b", want: true},
	{pattern: "a/b", path: "a/b/", want: true},
	// Case folding.
	{pattern: ".env*", path: ".ENV", want: false},
	{pattern: ".env*", fold: true, path: ".ENV", want: true},
	{pattern: ".env*", fold: true, path: "x/.Env.production", want: true},
	{pattern: "*.PEM", fold: true, path: "key.pem", want: true},
	{pattern: "secret[a-c]", fold: true, path: "SECRETB", want: true},
	{pattern: "secret[!a-c]", fold: true, path: "SECRETB", want: false},
	{pattern: "id_rsa", fold: true, path: "ID_RSA", want: true},
	{pattern: "id_rsa", fold: true, path: "id_r\u017fa", want: true}, // long s folds to s
	{pattern: "kube", fold: true, path: "\u212aube", want: true},     // Kelvin sign folds to k
	// Unicode normalisation: NFD and NFC spell the same name.
	{pattern: "caf\u00e9.key", path: "cafe\u0301.key", want: true},
	{pattern: "cafe\u0301.key", path: "caf\u00e9.key", want: true},
	{pattern: "CAF\u00c9/**", fold: true, path: "cafe\u0301/x", want: true},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchTests {
		name := fmt.Sprintf("%s~%s/fold=%v/dir=%v", tt.pattern, tt.path, tt.fold, tt.isDir)
		t.Run(name, func(t *testing.T) {
			p, err := Compile(tt.pattern, tt.fold)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tt.pattern, err)
			}
			if got := p.Match(tt.path, tt.isDir); got != tt.want {
				t.Errorf("Compile(%q).Match(%q, %v) = %v, want %v", tt.pattern, tt.path, tt.isDir, got, tt.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		pattern, path string
		isDir         bool
		want          bool
	}{
		{".github", ".github/workflows/ci.yml", false, true},
		{"config/prod", "config/prod/db.yaml", false, true},
		{"config/prod", "config/production.yaml", false, false},
		{"build/", "build/out.o", false, true},
		{"build/", "build", false, false},
		{"*.key", "keys.key/inner", false, true},
		{"config/**", "config", true, false},
	}
	for _, tt := range tests {
		p := MustCompile(tt.pattern, true)
		if got := p.Covers(tt.path, tt.isDir); got != tt.want {
			t.Errorf("Compile(%q).Covers(%q, %v) = %v, want %v", tt.pattern, tt.path, tt.isDir, got, tt.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, pat := range []string{"", "/", "./", "a[", "a[b-", `a\`, "[z-a]", "a\x00", "\xff"} {
		if _, err := Compile(pat, false); !errors.Is(err, ErrBadPattern) {
			t.Errorf("Compile(%q) error = %v, want ErrBadPattern", pat, err)
		}
	}
}

func TestSet(t *testing.T) {
	s, err := NewSet([]string{"*.pem", "secrets/"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if pat, ok := s.Match("a/B.PEM", false); !ok || pat != "*.pem" {
		t.Errorf("Match(a/B.PEM) = %q, %v", pat, ok)
	}
	if _, ok := s.Match("secrets", false); ok {
		t.Error("secrets/ matched a file")
	}
	if pat, ok := s.Covers("x/secrets/db", false); !ok || pat != "secrets/" {
		t.Errorf("Covers(x/secrets/db) = %q, %v", pat, ok)
	}
	if _, err := NewSet([]string{"ok", "bad["}, false); err == nil {
		t.Error("NewSet accepted an invalid pattern")
	}
	var empty *Set
	if _, ok := empty.Match("x", false); ok {
		t.Error("nil set matched")
	}
}

func BenchmarkMatch(b *testing.B) {
	s, err := NewSet([]string{".env*", "*.pem", "*.key", "id_rsa*", "**/.aws/credentials", "config/prod/**"}, true)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Match("src/internal/server/handlers/user_profile_test.go", false)
	}
}

// FuzzMatch checks the matcher against an independent implementation: the
// pattern translated into a regular expression.
func FuzzMatch(f *testing.F) {
	for _, tt := range matchTests {
		f.Add(tt.pattern, tt.path, tt.fold, tt.isDir)
	}
	f.Add("a/**/b/**/c", "a/x/b/y/z/c", false, false)
	f.Add("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", false, false)
	f.Fuzz(func(t *testing.T, pattern, path string, fold, isDir bool) {
		if len(pattern) > 200 || len(path) > 400 {
			return
		}
		p, err := Compile(pattern, fold)
		if err != nil {
			if p != nil {
				t.Fatal("Compile returned both a pattern and an error")
			}
			if !errors.Is(err, ErrBadPattern) {
				t.Fatalf("Compile(%q) error %v is not ErrBadPattern", pattern, err)
			}
			return
		}
		if !utf8.ValidString(path) || strings.ContainsRune(path, 0) {
			p.Match(path, isDir) // must not panic
			return
		}
		got := p.Match(path, isDir)
		re, ok := toRegexp(pattern, fold)
		if ok {
			want := !(strings.HasSuffix(strings.TrimLeft(norm.NFC.String(pattern), "/"), "/") && !isDir) &&
				cleanPath(path) != "" && re.MatchString(cleanPath(path))
			if got != want {
				t.Fatalf("Compile(%q, fold=%v).Match(%q, %v) = %v; regexp %s says %v", pattern, fold, path, isDir, got, re, want)
			}
		}
		// The NFD spelling of a path matches exactly when the NFC one does.
		if got2 := p.Match(norm.NFD.String(path), isDir); got2 != got {
			t.Fatalf("Match(%q) = %v but Match(NFD) = %v", path, got, got2)
		}
		if fold {
			if got2 := p.Match(strings.ToUpper(path), isDir); got2 != p.Match(strings.ToLower(strings.ToUpper(path)), isDir) {
				t.Fatalf("folding pattern %q tells case variants of %q apart", pattern, path)
			}
		}
		// Covers is Match on the path or a parent.
		if got && !p.Covers(path, isDir) {
			t.Fatalf("Match(%q) but not Covers", path)
		}
		// A Set of one pattern agrees with the pattern.
		set, err := NewSet([]string{pattern}, fold)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := set.Match(path, isDir); ok != got {
			t.Fatalf("Set.Match(%q) = %v, Pattern.Match = %v", path, ok, got)
		}
		if _, ok := set.Covers(path, isDir); ok != p.Covers(path, isDir) {
			t.Fatalf("Set.Covers(%q) = %v, Pattern.Covers = %v", path, ok, !ok)
		}
	})
}

func cleanPath(p string) string {
	var out []string
	for e := range strings.SplitSeq(norm.NFC.String(p), "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return strings.Join(out, "/")
}

// toRegexp translates a pattern into an anchored regular expression over a
// cleaned path, following the package documentation. ok is false for
// patterns the translation does not handle.
func toRegexp(pattern string, fold bool) (*regexp.Regexp, bool) {
	s := norm.NFC.String(pattern)
	anchored := strings.HasPrefix(s, "/")
	s = strings.Trim(s, "/")
	var parts []string
	for e := range strings.SplitSeq(s, "/") {
		if e != "" && e != "." {
			parts = append(parts, e)
		}
	}
	if len(parts) == 0 {
		return nil, false
	}
	if !anchored && len(parts) == 1 {
		parts = append([]string{"**"}, parts...)
	}
	// "**/**" is "**".
	var collapsed []string
	for _, part := range parts {
		if part == "**" && len(collapsed) > 0 && collapsed[len(collapsed)-1] == "**" {
			continue
		}
		collapsed = append(collapsed, part)
	}
	parts = collapsed
	var b strings.Builder
	if fold {
		b.WriteString("(?i)")
	}
	b.WriteString("^")
	for i, part := range parts {
		last := i == len(parts)-1
		if part == "**" {
			switch {
			case last && i > 0:
				b.WriteString("(?:/[^/]+)+")
			case last:
				b.WriteString("[^/]+(?:/[^/]+)*")
			default:
				b.WriteString("(?:[^/]+/)*")
			}
			continue
		}
		el, ok := elemRegexp(part)
		if !ok {
			return nil, false
		}
		b.WriteString(el)
		nextIsTrailingAny := i+1 == len(parts)-1 && parts[i+1] == "**"
		if !last && !nextIsTrailingAny {
			b.WriteString("/")
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, false
	}
	return re, true
}

func elemRegexp(part string) (string, bool) {
	var b strings.Builder
	rs := []rune(part)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			b.WriteString("[^/]*")
		case '?':
			b.WriteString("[^/]")
		case '\\':
			if i+1 == len(rs) {
				return "", false
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			j := i + 1
			neg := false
			if j < len(rs) && (rs[j] == '!' || rs[j] == '^') {
				neg = true
				j++
			}
			var cls strings.Builder
			first := true
			for {
				if j >= len(rs) {
					return "", false
				}
				if rs[j] == ']' && !first {
					break
				}
				first = false
				lo := rs[j]
				if lo == '\\' {
					if j+1 >= len(rs) {
						return "", false
					}
					j++
					lo = rs[j]
				}
				j++
				hi := lo
				if j+1 < len(rs) && rs[j] == '-' && rs[j+1] != ']' {
					hi = rs[j+1]
					j += 2
					if hi == '\\' {
						if j >= len(rs) {
							return "", false
						}
						hi = rs[j]
						j++
					}
				}
				fmt.Fprintf(&cls, `\x{%x}-\x{%x}`, lo, hi)
			}
			if neg {
				b.WriteString("[^/" + cls.String() + "]")
			} else {
				b.WriteString("[" + cls.String() + "]")
			}
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String(), true
}
