package fsscope

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

func fileEntry(p string) entry { return entry{Path: p, Mode: sIFREG | 0o644, Nlink: 1} }
func dirEntry(p string) entry  { return entry{Path: p, Mode: sIFDIR | 0o755} }

func TestDefaultDenyRead(t *testing.T) {
	set, err := glob.NewSet(DefaultDenyRead(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".env", "a/.env.local", "x/.ENV", "tls.pem", "k/server.key", "home/.ssh/id_rsa", "id_ed25519.pub", ".netrc", "x/.aws/credentials", "home/.config/gcloud/application_default_credentials.json", "x/.kube/config"} {
		if _, ok := set.Covers(p, false); !ok {
			t.Errorf("default deny_read does not cover %s", p)
		}
	}
	for _, p := range []string{".git/config", "src/id_generator.go", "env.go", "README.md", "x/.config/app.yml", ".aws-notes"} {
		if pat, ok := set.Covers(p, false); ok {
			t.Errorf("default deny_read covers %s (pattern %q)", p, pat)
		}
	}
}

func TestPlanMasks(t *testing.T) {
	entries := []entry{
		dirEntry(""),
		{Path: ".env", Mode: sIFREG | 0o600, Ino: 10, Nlink: 2},
		dirEntry(".aws"),
		{Path: ".aws/credentials", Mode: sIFREG | 0o600, Ino: 20, Nlink: 2},
		dirEntry("src"),
		{Path: "src/alias", Mode: sIFREG | 0o600, Ino: 10, Nlink: 2}, // second name of .env
		{Path: "src/creds", Mode: sIFREG | 0o600, Ino: 20, Nlink: 2}, // second name of .aws/credentials
		{Path: "src/other", Mode: sIFREG | 0o600, Ino: 30, Nlink: 2},
		{Path: "src/other2", Mode: sIFREG | 0o600, Ino: 30, Nlink: 2},
		{Path: "link.pem", Mode: sIFLNK | 0o777, Ino: 40, Nlink: 1},
		{Path: "key.pem", Mode: sIFREG | 0o600, Ino: 50, Nlink: 1},
	}
	deny, err := glob.NewSet([]string{".env*", ".aws/", "*.pem"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range planMasks(entries, deny) {
		got = append(got, fmt.Sprintf("%s %s %s", m.Path, m.Kind, m.Rule))
	}
	want := []string{
		".aws dir .aws/",
		".env file .env*",
		"key.pem file *.pem",
		"src/alias file hard link to .env",
		"src/creds file hard link to .aws/credentials",
	}
	if !slices.Equal(got, want) {
		t.Errorf("masks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestIsGitConfigFile(t *testing.T) {
	tests := []struct {
		gd, rel string
		want    bool
	}{
		{".git", ".git/config", true},
		{".git", ".git/config.worktree", true},
		{".git", ".git/worktrees/wt1/config.worktree", true},
		{".git", ".git/hooks/config", false},
		{"sub/.git", "sub/.git/config", true},
		{"", "config", true},
		{".git", "config", false},
	}
	for _, tt := range tests {
		if got := isGitConfigFile(tt.gd, tt.rel); got != tt.want {
			t.Errorf("isGitConfigFile(%q, %q) = %v", tt.gd, tt.rel, got)
		}
	}
}

func TestChangedPackedRefs(t *testing.T) {
	old := []byte("# pack-refs with: peeled fully-peeled sorted\naaa refs/heads/main\nbbb refs/tags/v1\n^ccc\nddd refs/heads/dev\n")
	new := []byte("# pack-refs with: peeled fully-peeled sorted\naaa refs/heads/main\neee refs/heads/dev\nfff refs/heads/new\n")
	if got, want := changedPackedRefs(old, new), []string{"refs/heads/dev", "refs/heads/new", "refs/tags/v1"}; !slices.Equal(got, want) {
		t.Errorf("changedPackedRefs = %v, want %v", got, want)
	}
	if got := changedPackedRefs(old, nil); len(got) != 3 {
		t.Errorf("deleting packed-refs changes %v", got)
	}
	// git reads a tab after the id, and a duplicate line may be the one
	// its binary search finds.
	tricky := []byte("# pack-refs with: peeled fully-peeled sorted\nzzz refs/heads/main\naaa refs/heads/main\nbbb refs/tags/v1\n^ccc\nddd refs/heads/dev\nzzz\trefs/tags/v9\n")
	if got, want := changedPackedRefs(old, tricky), []string{"refs/heads/main", "refs/tags/v9"}; !slices.Equal(got, want) {
		t.Errorf("changedPackedRefs = %v, want %v", got, want)
	}
}

// fakeEnv builds a ruleEnv over a baseline and a change set, with file
// contents and git answers from maps.
func fakeEnv(ws wsState, base []entry, changes []Change, oldFiles, newFiles map[string]string, trackedFiles map[string]trackState) *ruleEnv {
	read := func(m map[string]string) func(string) ([]byte, error) {
		return func(rel string) ([]byte, error) {
			if v, ok := m[rel]; ok {
				return []byte(v), nil
			}
			return nil, nil
		}
	}
	return &ruleEnv{
		ws: &ws, base: newBaseline(base), changes: changes,
		readOld: read(oldFiles), readNew: read(newFiles),
		gitStatus: func(wt string, paths []string) (map[string]trackState, error) {
			out := map[string]trackState{}
			for _, p := range paths {
				out[p] = trackedFiles[joinRel(wt, p)]
			}
			return out, nil
		},
	}
}

func TestRules(t *testing.T) {
	repo := []entry{
		dirEntry(""), dirEntry(".git"), fileEntry(".git/HEAD"), dirEntry(".git/objects"), dirEntry(".git/refs"),
		dirEntry(".git/refs/heads"), fileEntry(".git/refs/heads/main"), fileEntry(".git/packed-refs"), fileEntry(".git/config"),
		dirEntry(".git/hooks"), dirEntry("src"), fileEntry("src/a.go"), fileEntry("notes.txt"), fileEntry("out.log"),
		dirEntry("vendor"), dirEntry("vendor/lib"), dirEntry("vendor/lib/.git"), fileEntry("vendor/lib/x.go"),
		dirEntry("bare.git"), fileEntry("bare.git/HEAD"), dirEntry("bare.git/objects"), dirEntry("bare.git/refs"),
		dirEntry(".githooks"),
	}
	oldFiles := map[string]string{
		".git/config":      "[core]\n\thooksPath = .githooks\n",
		".git/packed-refs": "aaa refs/heads/main\nbbb refs/tags/v1\n",
		".git/HEAD":        "ref: refs/heads/main\n",
		// main is loose, shadowing a stale packed entry.
		".git/refs/heads/main": "abc\n",
	}
	tests := []struct {
		name     string
		ws       wsState
		change   Change
		newFiles map[string]string
		tracked  map[string]trackState
		rule     string // "" = accepted
	}{
		{name: "protected path", ws: wsState{Protect: []string{"src/"}}, change: Change{Path: "src/a.go", Kind: KindModified, Type: TypeFile}, rule: RuleProtect},
		{name: "protected by rename source", ws: wsState{Protect: []string{"/notes.txt"}}, change: Change{Path: "n2.txt", OldPath: "notes.txt", Kind: KindRenamed, Type: TypeFile}, rule: RuleProtect},
		{name: "protect folds case", ws: wsState{Protect: []string{"SRC/**"}}, change: Change{Path: "src/a.go", Kind: KindDeleted, Type: TypeFile}, rule: RuleProtect},
		{name: "unprotected", ws: wsState{Protect: []string{"docs/**"}}, change: Change{Path: "src/a.go", Kind: KindModified, Type: TypeFile}},
		{name: "fifo", change: Change{Path: "p", Kind: KindAdded, Type: TypeFIFO}, rule: RuleSpecialFile},
		{name: "device replacing a file", change: Change{Path: "notes.txt", Kind: KindType, Type: TypeDevice, OldType: TypeFile}, rule: RuleSpecialFile},
		{name: "hook", change: Change{Path: ".git/hooks/pre-push", Kind: KindAdded, Type: TypeFile}, rule: RuleGitExec},
		{name: "hook sample", change: Change{Path: ".git/hooks/pre-push.sample", Kind: KindAdded, Type: TypeFile}},
		{name: "hook deleted", change: Change{Path: ".git/hooks/old", Kind: KindDeleted, Type: TypeFile}},
		{name: "hooksPath hook", change: Change{Path: ".githooks/pre-commit", Kind: KindAdded, Type: TypeFile}, rule: RuleGitExec},
		{name: "config alias", change: Change{Path: ".git/config", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/config": oldFiles[".git/config"] + "[alias]\n\tx = !rm -rf ~\n"}, rule: RuleGitExec},
		{name: "config branch", change: Change{Path: ".git/config", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/config": oldFiles[".git/config"] + "[branch \"x\"]\n\tremote = origin\n"}},
		{name: "bare repo config", change: Change{Path: "bare.git/config", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{"bare.git/config": "[core]\n\tsshCommand = evil\n"}, rule: RuleGitExec},
		{name: "loose ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/main", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/main": "ccc\n"}, rule: RuleProtectRefs},
		{name: "loose ref rewritten to the same value", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/main", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/main": "abc"}},
		{name: "loose ref made symbolic", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/main", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/main": "ref: refs/heads/dev\n"}, rule: RuleProtectRefs},
		{name: "loose ref deleted, packed value differs", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/main", Kind: KindDeleted, Type: TypeFile}, rule: RuleProtectRefs},
		{name: "loose ref replaced by a directory", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/main", Kind: KindType, Type: TypeDir, OldType: TypeFile}, rule: RuleProtectRefs},
		{name: "symbolic ref to a protected ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/dev", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/dev": "ref:refs/heads/main\n"}, rule: RuleProtectRefs},
		{name: "symbolic ref to another ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/dev", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/dev": "ref: refs/heads/feature\n"}},
		{name: "other loose ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/refs/heads/dev", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/dev": "ddd\n"}},
		{name: "ref glob one level", ws: wsState{ProtectRefs: []string{"refs/heads/*"}}, change: Change{Path: ".git/refs/heads/team/x", Kind: KindAdded, Type: TypeFile}},
		{name: "ref glob deep", ws: wsState{ProtectRefs: []string{"refs/heads/**"}}, change: Change{Path: ".git/refs/heads/team/x", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/refs/heads/team/x": "ddd\n"}, rule: RuleProtectRefs},
		{name: "reflog", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/logs/refs/heads/main", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/logs/refs/heads/main": "aaa ccc x <x> 1 +0000\tmoved\n"}, rule: RuleProtectRefs},
		{name: "reflog deleted", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/logs/refs/heads/main", Kind: KindDeleted, Type: TypeFile}, rule: RuleProtectRefs},
		{name: "packed tag", ws: wsState{ProtectRefs: []string{"refs/tags/*"}}, change: Change{Path: ".git/packed-refs", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/packed-refs": "aaa refs/heads/main\n"}, rule: RuleProtectRefs},
		{name: "packed other", ws: wsState{ProtectRefs: []string{"refs/tags/*"}}, change: Change{Path: ".git/packed-refs", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/packed-refs": "aaa refs/heads/main\nbbb refs/tags/v1\nccc refs/heads/new\n"}},
		{name: "packed deleted", ws: wsState{ProtectRefs: []string{"refs/tags/*"}}, change: Change{Path: ".git/packed-refs", Kind: KindDeleted, Type: TypeFile}, rule: RuleProtectRefs},
		// main is loose on the host: its packed entry is not what git reads.
		{name: "packed deleted, protected ref loose", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/packed-refs", Kind: KindDeleted, Type: TypeFile}},
		{name: "packed entry listed twice", ws: wsState{ProtectRefs: []string{"refs/tags/*"}}, change: Change{Path: ".git/packed-refs", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/packed-refs": "aaa refs/heads/main\nbbb refs/tags/v1\nccc refs/tags/v1\n"}, rule: RuleProtectRefs},
		{name: "merge in progress on a protected branch", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/MERGE_HEAD", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/MERGE_HEAD": "aaa\n"}, rule: RuleProtectRefs},
		{name: "merge in progress on another branch", ws: wsState{ProtectRefs: []string{"refs/heads/dev"}}, change: Change{Path: ".git/MERGE_HEAD", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/MERGE_HEAD": "aaa\n"}},
		{name: "reftable", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: ".git/reftable/0x01.ref", Kind: KindAdded, Type: TypeFile}, rule: RuleProtectRefs},
		{name: "bare repo ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: "bare.git/refs/heads/main", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{"bare.git/refs/heads/main": "aaa\n"}, rule: RuleProtectRefs},
		{name: "bare repo empty ref", ws: wsState{ProtectRefs: []string{"refs/heads/main"}}, change: Change{Path: "bare.git/refs/heads/main", Kind: KindAdded, Type: TypeFile}, rule: RuleProtectRefs},
		{name: "untracked deletion", ws: wsState{PreserveUntracked: true}, change: Change{Path: "notes.txt", Kind: KindDeleted, Type: TypeFile}, rule: RulePreserveUntracked},
		{name: "ignored deletion", ws: wsState{PreserveUntracked: true}, change: Change{Path: "out.log", Kind: KindDeleted, Type: TypeFile}, tracked: map[string]trackState{"out.log": ignored}, rule: RulePreserveUntracked},
		{name: "tracked deletion", ws: wsState{PreserveUntracked: true}, change: Change{Path: "src/a.go", Kind: KindDeleted, Type: TypeFile}, tracked: map[string]trackState{"src/a.go": tracked}},
		{name: "untracked overwritten by a directory", ws: wsState{PreserveUntracked: true}, change: Change{Path: "notes.txt", Kind: KindType, Type: TypeDir, OldType: TypeFile}, rule: RulePreserveUntracked},
		{name: "untracked renamed away", ws: wsState{PreserveUntracked: true}, change: Change{Path: "n.txt", OldPath: "notes.txt", Kind: KindRenamed, Type: TypeFile}, rule: RulePreserveUntracked},
		{name: "nested repo asks the nested repo", ws: wsState{PreserveUntracked: true}, change: Change{Path: "vendor/lib/x.go", Kind: KindDeleted, Type: TypeFile}, tracked: map[string]trackState{"vendor/lib/x.go": tracked}},
		{name: "git internals", ws: wsState{PreserveUntracked: true}, change: Change{Path: ".git/refs/heads/main", Kind: KindDeleted, Type: TypeFile}},
		{name: "modification is not deletion", ws: wsState{PreserveUntracked: true}, change: Change{Path: "notes.txt", Kind: KindModified, Type: TypeFile}},
		// git_meta: only inert files inside a git directory.
		{name: "object", change: Change{Path: ".git/objects/ab/cdef", Kind: KindAdded, Type: TypeFile}},
		{name: "pack dir", change: Change{Path: ".git/objects/pack", Kind: KindAdded, Type: TypeDir}},
		{name: "index", change: Change{Path: ".git/index", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/index": testIndex("a.txt", "src/b.go")}},
		{name: "index entry in .git", change: Change{Path: ".git/index", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/index": testIndex(".git/hooks/post-commit", "a.txt")}, rule: RuleGitMeta},
		{name: "index entry with ..", change: Change{Path: "vendor/lib/.git/index", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{"vendor/lib/.git/index": testIndex("../../x")}, rule: RuleGitMeta},
		{name: "shared index entry in .git", change: Change{Path: ".git/sharedindex.0123", Kind: KindAdded, Type: TypeFile}, newFiles: map[string]string{".git/sharedindex.0123": testIndex("a/.GIT/config")}, rule: RuleGitMeta},
		{name: "index unreadable", change: Change{Path: ".git/index", Kind: KindModified, Type: TypeFile}, newFiles: map[string]string{".git/index": "DIRC"}, rule: RuleGitMeta},
		{name: "ORIG_HEAD", change: Change{Path: ".git/ORIG_HEAD", Kind: KindAdded, Type: TypeFile}},
		{name: "commondir", change: Change{Path: ".git/commondir", Kind: KindAdded, Type: TypeFile}, rule: RuleGitMeta},
		{name: "alternates", change: Change{Path: ".git/objects/info/alternates", Kind: KindAdded, Type: TypeFile}, rule: RuleGitMeta},
		{name: "info attributes", change: Change{Path: ".git/info/attributes", Kind: KindAdded, Type: TypeFile}, rule: RuleGitMeta},
		{name: "unknown dir in .git", change: Change{Path: ".git/c", Kind: KindAdded, Type: TypeDir}, rule: RuleGitMeta},
		{name: "HEAD symlink", change: Change{Path: ".git/HEAD", Kind: KindType, Type: TypeSymlink, OldType: TypeFile, LinkTarget: "refs/heads/x"}, rule: RuleGitMeta},
		{name: "config symlink", change: Change{Path: ".git/config", Kind: KindType, Type: TypeSymlink, OldType: TypeFile, LinkTarget: "../evil"}, rule: RuleGitMeta},
		{name: "rebase state", change: Change{Path: ".git/rebase-merge", Kind: KindAdded, Type: TypeDir}, rule: RuleGitMeta},
		{name: ".git becomes a symlink", change: Change{Path: ".git", Kind: KindType, Type: TypeSymlink, OldType: TypeDir, LinkTarget: "evil"}, rule: RuleGitMeta},
		{name: "new .git in a subdirectory", change: Change{Path: "src/.git", Kind: KindAdded, Type: TypeDir}, rule: RuleGitMeta},
		{name: "new gitfile", change: Change{Path: "src/.git", Kind: KindAdded, Type: TypeFile}, rule: RuleGitMeta},
		{name: "new gitfile allowed by name", ws: wsState{GitAllow: []string{"src/.git"}}, change: Change{Path: "src/.git", Kind: KindAdded, Type: TypeFile}},
		{name: "info attributes allowed by name", ws: wsState{GitAllow: []string{".git/info/attributes"}}, change: Change{Path: ".git/info/attributes", Kind: KindAdded, Type: TypeFile}},
		{name: "hook allowed by name is still a hook", ws: wsState{GitAllow: []string{".git/hooks/**"}}, change: Change{Path: ".git/hooks/pre-push", Kind: KindAdded, Type: TypeFile}, rule: RuleGitExec},
		{name: "nested repo's hooks", change: Change{Path: "vendor/lib/.git/hooks/post-checkout", Kind: KindAdded, Type: TypeFile}, rule: RuleGitExec},
		{name: "nested repo's object", change: Change{Path: "vendor/lib/.git/objects/ab/cd", Kind: KindAdded, Type: TypeFile}},
		{name: "bare repo's info/attributes", change: Change{Path: "bare.git/info/attributes", Kind: KindAdded, Type: TypeFile}, rule: RuleGitMeta},
		{name: ".git deleted", change: Change{Path: ".git", Kind: KindDeleted, Type: TypeDir}},
		// symlink_escape.
		{name: "absolute link", change: Change{Path: "l", Kind: KindAdded, Type: TypeSymlink, LinkTarget: "/etc/shadow"}, rule: RuleSymlinkEscape},
		{name: "relative link out", change: Change{Path: "src/l", Kind: KindAdded, Type: TypeSymlink, LinkTarget: "../../etc/passwd"}, rule: RuleSymlinkEscape},
		{name: "relative link in", change: Change{Path: "src/l", Kind: KindAdded, Type: TypeSymlink, LinkTarget: "../notes.txt"}},
		{name: "retargeted out", change: Change{Path: "src/l", Kind: KindSymlink, Type: TypeSymlink, LinkTarget: ".." + "/.."}, rule: RuleSymlinkEscape},
		{name: "file replaced by a link out", change: Change{Path: "notes.txt", Kind: KindType, Type: TypeSymlink, OldType: TypeFile, LinkTarget: "/"}, rule: RuleSymlinkEscape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := fakeEnv(tt.ws, repo, []Change{tt.change}, oldFiles, tt.newFiles, tt.tracked)
			rej, err := e.evaluate()
			if err != nil {
				t.Fatal(err)
			}
			if got := rej[0].Rule; got != tt.rule {
				t.Errorf("rule = %q (%s), want %q", got, rej[0].Reason, tt.rule)
			}
		})
	}
}

// TestRulesRefExceptions checks protect_refs entries with "!" exceptions:
// read in order, the last matching entry decides, on loose refs, their
// logs and packed refs alike.
func TestRulesRefExceptions(t *testing.T) {
	repo := []entry{
		dirEntry(""), dirEntry(".git"), fileEntry(".git/HEAD"), dirEntry(".git/objects"), dirEntry(".git/refs"),
		dirEntry(".git/refs/heads"), fileEntry(".git/refs/heads/main"),
		dirEntry(".git/refs/heads/alex"), fileEntry(".git/refs/heads/alex/cleanup-auth-4812-old"), fileEntry(".git/refs/heads/alex/cleanup-auth-active"),
		dirEntry(".git/refs/heads/alice"), fileEntry(".git/refs/heads/alice/cleanup-auth-4812-old"),
		dirEntry(".git/logs"), dirEntry(".git/logs/refs"), dirEntry(".git/logs/refs/heads"), dirEntry(".git/logs/refs/heads/alex"),
		fileEntry(".git/logs/refs/heads/alex/cleanup-auth-4812-old"), fileEntry(".git/logs/refs/heads/alex/cleanup-auth-active"),
		fileEntry(".git/packed-refs"), dirEntry("src"), fileEntry("src/a.go"),
	}
	const packed = "# pack-refs with: peeled fully-peeled sorted\n" +
		"a1 refs/heads/alex/cleanup-auth-4812-old\n" +
		"a2 refs/heads/alex/cleanup-auth-4819-old\n" +
		"a3 refs/heads/alex/cleanup-billing-old\n" +
		"a4 refs/heads/alice/cleanup-auth-4812-old\n" +
		"a5 refs/heads/main\n"
	// The loose files hold values of their own: git reads them, not the
	// packed entries they shadow.
	oldFiles := map[string]string{
		".git/packed-refs":                            packed,
		".git/refs/heads/main":                        "m0\n",
		".git/refs/heads/alex/cleanup-auth-4812-old":  "l1\n",
		".git/refs/heads/alex/cleanup-auth-active":    "l6\n",
		".git/refs/heads/alice/cleanup-auth-4812-old": "l4\n",
	}
	without := func(refs ...string) string {
		var b strings.Builder
		for _, line := range strings.SplitAfter(packed, "\n") {
			keep := true
			for _, r := range refs {
				if strings.HasSuffix(strings.TrimSuffix(line, "\n"), " "+r) {
					keep = false
				}
			}
			if keep {
				b.WriteString(line)
			}
		}
		return b.String()
	}
	// The bench's grant for "delete my branches of ticket 4812 on the local
	// side": alex's namespace is protected but for the ticket's branches,
	// and the operator's protected refs and other owners come after the
	// exception, so it cannot reach them.
	ticket := []string{"refs/heads/alex/**", "!refs/heads/alex/cleanup-auth-4812-*", "refs/heads/*", "refs/heads/alice/**"}
	loose := func(kind Kind, ref string) Change {
		return Change{Path: ".git/" + ref, Kind: kind, Type: TypeFile}
	}
	packedMod := Change{Path: ".git/packed-refs", Kind: KindModified, Type: TypeFile}
	packedNew := func(data string) map[string]string { return map[string]string{".git/packed-refs": data} }
	tests := []struct {
		name     string
		refs     []string
		change   Change
		newFiles map[string]string
		want     string // "" = accepted, else the protect_refs entry named in the reason
	}{
		{name: "loose deletion of an excepted ref", refs: ticket, change: loose(KindDeleted, "refs/heads/alex/cleanup-auth-4812-old")},
		{name: "loose update of an excepted ref", refs: ticket, change: loose(KindModified, "refs/heads/alex/cleanup-auth-4812-old")},
		{name: "new ref an exception covers", refs: ticket, change: loose(KindAdded, "refs/heads/alex/cleanup-auth-4812-new")},
		{name: "loose deletion outside the exception", refs: ticket, change: loose(KindDeleted, "refs/heads/alex/cleanup-auth-active"), want: "refs/heads/alex/**"},
		{name: "loose update outside the exception", refs: ticket, change: loose(KindModified, "refs/heads/alex/cleanup-auth-active"), want: "refs/heads/alex/**"},
		{name: "exception does not reach another owner", refs: ticket, change: loose(KindDeleted, "refs/heads/alice/cleanup-auth-4812-old"), want: "refs/heads/alice/**"},
		{name: "exception does not cross an element", refs: ticket, change: loose(KindAdded, "refs/heads/alex/cleanup-auth-4812-x/y"), want: "refs/heads/alex/**"},
		{name: "log of an excepted ref", refs: ticket, change: loose(KindDeleted, "logs/refs/heads/alex/cleanup-auth-4812-old")},
		{name: "log of a protected ref", refs: ticket, change: loose(KindDeleted, "logs/refs/heads/alex/cleanup-auth-active"), want: "refs/heads/alex/**"},
		{name: "trunk stays protected", refs: ticket, change: loose(KindModified, "refs/heads/main"), want: "refs/heads/*"},
		{name: "exception overridden by a later entry", refs: []string{"refs/heads/alex/**", "!refs/heads/alex/**", "refs/heads/alex/*-active"}, change: loose(KindDeleted, "refs/heads/alex/cleanup-auth-active"), want: "refs/heads/alex/*-active"},
		{name: "exception before the entry it would except", refs: []string{"!refs/heads/alex/cleanup-auth-4812-*", "refs/heads/alex/**"}, change: loose(KindDeleted, "refs/heads/alex/cleanup-auth-4812-old"), want: "refs/heads/alex/**"},
		{name: "exception matching nothing", refs: []string{"refs/heads/**", "!refs/heads/nobody/*", "!refs/tags/none"}, change: loose(KindDeleted, "refs/heads/alex/cleanup-auth-4812-old"), want: "refs/heads/**"},
		{name: "exceptions only protect nothing", refs: []string{"!refs/heads/**"}, change: loose(KindDeleted, "refs/heads/main")},
		{name: "packed deletion of excepted refs", refs: ticket, change: packedMod, newFiles: packedNew(without("refs/heads/alex/cleanup-auth-4812-old"))},
		{name: "packed update of an excepted ref", refs: ticket, change: packedMod, newFiles: packedNew(strings.Replace(packed, "a1 ", "b1 ", 1))},
		{name: "packed addition an exception covers", refs: ticket, change: packedMod, newFiles: packedNew(packed + "c1 refs/heads/alex/cleanup-auth-4812-new\n")},
		{name: "packed deletion beyond the exception", refs: ticket, change: packedMod, newFiles: packedNew(without("refs/heads/alex/cleanup-auth-4812-old", "refs/heads/alex/cleanup-billing-old")), want: "refs/heads/alex/**"},
		{name: "packed deletion of the next ticket's ref", refs: ticket, change: packedMod, newFiles: packedNew(without("refs/heads/alex/cleanup-auth-4812-old", "refs/heads/alex/cleanup-auth-4819-old")), want: "refs/heads/alex/**"},
		// Its loose file shadows the packed entry: git reads the same value.
		{name: "packed entry shadowed by a loose ref", refs: ticket, change: packedMod, newFiles: packedNew(without("refs/heads/alice/cleanup-auth-4812-old"))},
		{name: "packed-refs removed with protected refs in it", refs: ticket, change: Change{Path: ".git/packed-refs", Kind: KindDeleted, Type: TypeFile}, want: "refs/heads/alex/**"},
		{name: "ticket range", refs: []string{"refs/heads/alex/**", "!refs/heads/alex/cleanup-auth-48*-*"}, change: packedMod, newFiles: packedNew(without("refs/heads/alex/cleanup-auth-4812-old", "refs/heads/alex/cleanup-auth-4819-old"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := fakeEnv(wsState{Protect: []string{"**"}, ProtectRefs: tt.refs}, repo, []Change{tt.change}, oldFiles, tt.newFiles, nil)
			rej, err := e.evaluate()
			if err != nil {
				t.Fatal(err)
			}
			r, rejected := rej[0]
			switch {
			case tt.want == "" && rejected:
				t.Errorf("rejected (%s: %s), want accepted", r.Rule, r.Reason)
			case tt.want != "" && !rejected:
				t.Errorf("accepted, want rejected by %q", tt.want)
			case tt.want != "" && (r.Rule != RuleProtectRefs || !strings.HasSuffix(r.Reason, fmt.Sprintf("protected by %q", tt.want))):
				t.Errorf("rejection %s: %s; want protect_refs naming %q", r.Rule, r.Reason, tt.want)
			}
		})
	}
	// protect governs the working tree still.
	e := fakeEnv(wsState{Protect: []string{"**"}, ProtectRefs: ticket}, repo, []Change{{Path: "src/a.go", Kind: KindModified, Type: TypeFile}}, oldFiles, nil, nil)
	if rej, err := e.evaluate(); err != nil || rej[0].Rule != RuleProtect {
		t.Errorf("working tree change: %+v, %v; want rejected by protect", rej, err)
	}
}

func TestRefPatternsInvalid(t *testing.T) {
	for _, refs := range [][]string{{"!"}, {"refs/heads/**", "!"}, {"!refs/heads/[a"}, {"refs/heads/[a"}} {
		if _, err := refPatterns(refs); !errors.Is(err, glob.ErrBadPattern) {
			t.Errorf("refPatterns(%q) error = %v, want ErrBadPattern", refs, err)
		}
		e := fakeEnv(wsState{ProtectRefs: refs}, []entry{dirEntry("")}, []Change{{Path: "a", Kind: KindAdded, Type: TypeFile}}, nil, nil, nil)
		if _, err := e.evaluate(); err == nil {
			t.Errorf("evaluate with protect_refs %q succeeded", refs)
		}
	}
	if _, err := refPatterns([]string{"!refs/heads/x"}); err != nil {
		t.Errorf("refPatterns(!refs/heads/x): %v", err)
	}
}

func TestRulesNoRepository(t *testing.T) {
	e := fakeEnv(wsState{PreserveUntracked: true}, []entry{dirEntry(""), fileEntry("a")}, []Change{{Path: "a", Kind: KindDeleted, Type: TypeFile}}, nil, nil, nil)
	rej, err := e.evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if rej[0].Rule != RulePreserveUntracked || !strings.Contains(rej[0].Reason, "no repository") {
		t.Errorf("rejection %+v", rej[0])
	}
}

func TestBlockDependents(t *testing.T) {
	changes := []Change{
		{Path: "gone", Kind: KindDeleted, Type: TypeDir},
		{Path: "gone/keep", Kind: KindDeleted, Type: TypeFile},
		{Path: "gone/other", Kind: KindDeleted, Type: TypeFile},
		{Path: "gone/sub", Kind: KindDeleted, Type: TypeDir},
		{Path: "new", Kind: KindAdded, Type: TypeDir},
		{Path: "new/deep", Kind: KindAdded, Type: TypeDir},
		{Path: "new/deep/f", Kind: KindAdded, Type: TypeFile},
		{Path: "moved", OldPath: "new/deep/g", Kind: KindRenamed, Type: TypeFile},
		{Path: "ok", Kind: KindAdded, Type: TypeFile},
		{Path: "was-file", Kind: KindType, Type: TypeDir, OldType: TypeFile},
		{Path: "was-file/x", Kind: KindAdded, Type: TypeFile},
		{Path: "was-dir", Kind: KindType, Type: TypeFile, OldType: TypeDir},
		{Path: "was-dir/y", Kind: KindDeleted, Type: TypeFile},
	}
	blocked := map[int]string{1: "protected", 4: "protected", 9: "conflict", 12: "untracked"}
	deps := blockDependents(changes, blocked)
	var got []string
	for i := range changes {
		if _, ok := deps[i]; ok {
			got = append(got, changes[i].Path)
		}
	}
	want := []string{"gone", "new/deep", "new/deep/f", "moved", "was-file/x", "was-dir"}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("blocked by dependency %v, want %v", got, want)
	}
}

func TestBuildOpsOrder(t *testing.T) {
	base := newBaseline([]entry{dirEntry(""), dirEntry("old"), fileEntry("old/f"), fileEntry("m"), {Path: "x", Mode: sIFREG | 0o4755, UID: 7, GID: 8}})
	changes := []Change{
		{Path: "m", Kind: KindModified, Type: TypeFile, Mode: 0o6755},
		{Path: "n", Kind: KindAdded, Type: TypeDir, Mode: 0o2775},
		{Path: "n/f", Kind: KindAdded, Type: TypeFile, Mode: 0o644},
		{Path: "old", Kind: KindDeleted, Type: TypeDir},
		{Path: "old/f", Kind: KindDeleted, Type: TypeFile},
		{Path: "x", Kind: KindMode, Type: TypeFile, Mode: 0o4700},
	}
	ops := buildOps(changes, []int{0, 1, 2, 3, 4, 5}, base, Owner{UID: 1, GID: 2})
	var got []string
	for _, o := range ops {
		got = append(got, fmt.Sprintf("%s %s %o %d:%d", o.Kind, o.Path, o.Mode, o.UID, o.GID))
	}
	want := []string{
		"remove old/f 0 0:0",
		"rmdir old 0 0:0",
		"replace m 755 0:0",
		"mkdir n 775 1:2",
		"create n/f 644 1:2",
		"chmod x 4700 7:8",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ops =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCommittedMode(t *testing.T) {
	tests := []struct{ sandbox, host, want uint32 }{
		{0o755, 0o644, 0o755},
		{0o4755, 0o644, 0o755},   // setuid added: dropped
		{0o4755, 0o4755, 0o4755}, // setuid kept where the host had it
		{0o2775, 0o2755, 0o2775}, // setgid directory keeps it
		{0o0644, 0o4755, 0o644},  // removed by the sandbox: removed
		{0o0777, 0o0644, 0o775},  // world-write added: dropped
		{0o0777, 0o0777, 0o777},  // kept where the host had it
		{0o1777, 0o0755, 0o775},  // sticky added: dropped
	}
	for _, tt := range tests {
		if got := committedMode(tt.sandbox, tt.host); got != tt.want {
			t.Errorf("committedMode(%o, %o) = %o, want %o", tt.sandbox, tt.host, got, tt.want)
		}
	}
}

func TestMountsOrder(t *testing.T) {
	s := &Session{dir: "/state", st: state{
		Workspaces: []wsState{
			{Target: "/workspace", Mode: "overlay", Masks: []mask{{Path: ".env", Kind: maskFile}, {Path: "vendor/.env", Kind: maskFile}, {Path: ".git/config", Kind: maskCopy, Source: "masks/gitconfig-0-0"}}},
			{Target: "/workspace/vendor", Mode: "ro", Masks: []mask{{Path: "secrets", Kind: maskDir}}},
		},
		Mounts: []mountState{{Target: "/etc/tool", ReadOnly: true}},
	}}
	var got []string
	for _, m := range s.Mounts() {
		got = append(got, m.Destination+" "+m.Source+" "+strings.Join(m.Options, ","))
	}
	want := []string{
		"/workspace /state/mnt/ws0 bind,nosuid,nodev,rw",
		"/workspace/vendor /state/mnt/ws1 bind,nosuid,nodev,ro",
		"/etc/tool /state/mnt/m0 bind,nosuid,nodev,ro",
		"/workspace/.env /state/masks/empty-file bind,ro,nosuid,nodev,noexec",
		"/workspace/.git/config /state/masks/gitconfig-0-0 bind,ro,nosuid,nodev,noexec",
		"/workspace/vendor/secrets /state/masks/empty-dir bind,ro,nosuid,nodev,noexec",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Mounts =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// testIndex renders a version 2 git index (SHA-1) holding names.
func testIndex(names ...string) string {
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(names)))
	for _, n := range names {
		start := b.Len()
		b.Write(make([]byte, 24))
		binary.Write(&b, binary.BigEndian, uint32(0o100644))
		b.Write(make([]byte, 12+20))
		binary.Write(&b, binary.BigEndian, uint16(len(n)))
		b.WriteString(n)
		b.Write(make([]byte, (b.Len()-start+8)&^7-(b.Len()-start)))
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.String()
}

// TestRulesPackRefs: git pack-refs moves loose refs into packed-refs
// without changing a value; protect_refs accepts it, and commits the
// loose removal only with the packed-refs entry that replaces it.
func TestRulesPackRefs(t *testing.T) {
	repo := []entry{
		dirEntry(""), dirEntry(".git"), fileEntry(".git/HEAD"), dirEntry(".git/objects"), dirEntry(".git/refs"),
		dirEntry(".git/refs/heads"), fileEntry(".git/refs/heads/main"), fileEntry(".git/refs/heads/dev"),
		dirEntry(".git/refs/tags"), fileEntry(".git/packed-refs"),
	}
	oldFiles := map[string]string{
		".git/HEAD":            "ref: refs/heads/main\n",
		".git/refs/heads/main": "aaa\n",
		".git/refs/heads/dev":  "ddd\n",
		".git/packed-refs":     "# pack-refs with: peeled fully-peeled sorted\nbbb refs/heads/main\nttt refs/tags/v1\n",
	}
	packRefs := []Change{
		{Path: ".git/packed-refs", Kind: KindModified, Type: TypeFile},
		{Path: ".git/refs/heads/dev", Kind: KindDeleted, Type: TypeFile},
		{Path: ".git/refs/heads/main", Kind: KindDeleted, Type: TypeFile},
	}
	ws := wsState{ProtectRefs: []string{"refs/heads/main", "refs/tags/*"}}
	tests := []struct {
		name   string
		packed string
		want   []int // rejected change indexes
		// coupled are the changes blocked when the others are.
		coupled map[int][]int
	}{
		{name: "values kept", packed: "# pack-refs with: peeled fully-peeled sorted\nddd refs/heads/dev\naaa refs/heads/main\nttt refs/tags/v1\n",
			coupled: map[int][]int{1: {0}, 2: {0}}},
		{name: "main moved on the way", packed: "ddd refs/heads/dev\nccc refs/heads/main\nttt refs/tags/v1\n", want: []int{0, 2}, coupled: map[int][]int{1: {0}}},
		{name: "main dropped on the way", packed: "ddd refs/heads/dev\nttt refs/tags/v1\n", want: []int{0, 2}, coupled: map[int][]int{1: {0}}},
		{name: "main left at its stale packed value", packed: "ddd refs/heads/dev\nbbb refs/heads/main\nttt refs/tags/v1\n", want: []int{2}, coupled: map[int][]int{1: {0}}},
		{name: "a tag moved too", packed: "ddd refs/heads/dev\naaa refs/heads/main\nuuu refs/tags/v1\n", want: []int{0}, coupled: map[int][]int{1: {0}, 2: {0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := fakeEnv(ws, repo, packRefs, oldFiles, map[string]string{".git/packed-refs": tt.packed}, nil)
			rej, err := e.evaluate()
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for i, r := range rej {
				if r.Rule != RuleProtectRefs {
					t.Errorf("change %d: rule %s: %s", i, r.Rule, r.Reason)
				}
				got = append(got, i)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("rejected %v (%v), want %v", got, rej, tt.want)
			}
			if len(tt.coupled) > 0 || len(e.coupled) > 0 {
				if fmt.Sprint(e.coupled) != fmt.Sprint(tt.coupled) {
					t.Errorf("coupled %v, want %v", e.coupled, tt.coupled)
				}
			}
			// What the commit blocks in the end: a blocked packed-refs
			// takes main's loose removal with it.
			blocked := map[int]string{}
			for i, r := range rej {
				blocked[i] = r.Reason
			}
			more := blockCoupled(packRefs, e.coupled, blocked)
			if _, ok := blocked[0]; ok {
				if _, ok := blocked[2]; !ok && more[2] == "" {
					t.Errorf("packed-refs blocked, main's loose removal committed: %v", more)
				}
			}
		})
	}
}

func TestReflogPruned(t *testing.T) {
	const (
		a = "0000 1111 T <t@t> 1 +0000\tbranch: Created from HEAD\n"
		b = "1111 2222 T <t@t> 2 +0000\tcommit: x\n"
		c = "2222 3333 T <t@t> 3 +0000\n"
	)
	tests := []struct {
		name     string
		old, new string
		want     bool
	}{
		{"unchanged", a + b + c, a + b + c, true},
		{"expired entries", a + b + c, b + c, true},
		{"emptied", a + b, "", true},
		{"an entry without a message rewritten with an empty one", a + c, a + "2222 3333 T <t@t> 3 +0000\t\n", true},
		{"an entry added", a + b, a + b + c, false},
		{"an entry rewritten", a + b, a + "1111 9999 T <t@t> 2 +0000\tcommit: x\n", false},
		{"entries reordered", a + b, b + a, false},
		{"a log created", "", a, false},
	}
	for _, tt := range tests {
		if got := reflogPruned([]byte(tt.old), []byte(tt.new)); got != tt.want {
			t.Errorf("%s: reflogPruned = %v, want %v", tt.name, got, tt.want)
		}
	}
}
