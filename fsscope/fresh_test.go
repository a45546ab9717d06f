package fsscope

import (
	"slices"
	"strings"
	"testing"
)

func TestWalkCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "a", -1},
		{"a", "", 1},
		{"a", "a", 0},
		{"a", "b", -1},
		{"a", "a/b", -1},     // a directory before what it holds
		{"a/b", "a.txt", -1}, // '/' > '.' in bytes, but "a" < "a.txt"
		{"a.txt", "a/b", 1},
		{"a/b/c", "a/c", -1},
		{"a-b", "a/b", 1},
		{"B", "a", -1}, // byte order, as readdir names are sorted
		{"sub/deep/.env", "sub/deep/c.go", -1},
	}
	for _, tt := range tests {
		if got := walkCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("walkCompare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzWalkCompare checks walkCompare against comparing the paths' element
// lists, and that it is antisymmetric.
func FuzzWalkCompare(f *testing.F) {
	for _, s := range [][2]string{{"", "a"}, {"a/b", "a.txt"}, {"a/b/c", "a/c"}, {"x", "x/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		got := walkCompare(a, b)
		if back := walkCompare(b, a); back != -got {
			t.Fatalf("walkCompare(%q, %q) = %d but walkCompare(%q, %q) = %d", a, b, got, b, a, back)
		}
		if a == "" || b == "" {
			return
		}
		if want := slices.Compare(strings.Split(a, "/"), strings.Split(b, "/")); got != want {
			t.Fatalf("walkCompare(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}

func TestEntryDiff(t *testing.T) {
	base := entry{Path: "f", Mode: sIFREG | 0o644, UID: 1, GID: 1, Size: 3, Ino: 7, Nlink: 1, Mtime: 10, Ctime: 10, Hash: "h"}
	tests := []struct {
		name   string
		change func(e *entry)
		want   string
	}{
		{"same", func(*entry) {}, ""},
		{"hash is left out", func(e *entry) { e.Hash = "other" }, ""},
		{"type", func(e *entry) { e.Mode = sIFLNK | 0o777 }, "type"},
		{"mount", func(e *entry) { e.Mount = true }, "mount"},
		{"mode", func(e *entry) { e.Mode = sIFREG | 0o600 }, "mode"},
		{"owner", func(e *entry) { e.GID = 2 }, "owner"},
		{"inode", func(e *entry) { e.Ino = 8 }, "inode"},
		{"link count", func(e *entry) { e.Nlink = 2 }, "link count"},
		{"size", func(e *entry) { e.Size = 4 }, "size"},
		{"mtime", func(e *entry) { e.Mtime = 11 }, "mtime"},
		{"ctime", func(e *entry) { e.Ctime = 11 }, "ctime"},
		{"symlink target", func(e *entry) { e.Link = "x" }, "symlink target"},
		{"path", func(e *entry) { e.Path = "g" }, "metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := base
			tt.change(&now)
			if got := entryDiff(&base, &now); got != tt.want {
				t.Errorf("entryDiff = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStaleReason(t *testing.T) {
	was := []entry{dirEntry(""), dirEntry("a"), fileEntry("a/b"), fileEntry("c")}
	chmod := fileEntry("a/b")
	chmod.Mode = sIFREG | 0o600
	tests := []struct {
		name string
		k    int
		now  *entry
		want string
	}{
		{"added before", 2, ptr(fileEntry("a/a")), "path /w/a/a added"},
		{"removed", 2, ptr(fileEntry("a.txt")), "path /w/a/b removed"},
		{"changed", 2, &chmod, "path /w/a/b changed (mode)"},
		{"same metadata", 2, ptr(fileEntry("a/b")), "path /w/a/b changed (content)"},
		{"added past the end", 4, ptr(fileEntry("d")), "path /w/d added"},
		{"walk ended", 3, nil, "path /w/c removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := staleReason("/w", was, tt.k, tt.now); got != tt.want {
				t.Errorf("staleReason = %q, want %q", got, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
