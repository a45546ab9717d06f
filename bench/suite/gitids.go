package suite

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/fixture"
)

// setCommitIDs sets the id of every commit of the fixture's repository:
// the world builds the repository with git fast-import and checks each
// ref against these ids (and the workspace's checkout creates its
// branches at them). The main branch is one commit of the initial file;
// each branch is one commit on it adding or replacing the branch's file,
// authored and committed by the fixture's user at the commit's date.
func setCommitIDs(g *fixture.Git) {
	ident := fmt.Sprintf("%s <%s>", g.UserName, g.UserEmail)
	root := gitTree{}
	root.add(g.Initial.RelPath, g.Initial.Content)
	g.Initial.ID = gitCommit(root.hash(), "", ident, g.Initial)
	for i := range g.Branches {
		c := &g.Branches[i].Commit
		t := gitTree{}
		t.add(g.Initial.RelPath, g.Initial.Content)
		t.add(c.RelPath, c.Content)
		c.ID = gitCommit(t.hash(), g.Initial.ID, ident, *c)
	}
}

// gitTree is a directory: a file's content (string) or a subdirectory
// (gitTree) by name.
type gitTree map[string]any

func (t gitTree) add(path, content string) {
	dir, rest, nested := strings.Cut(path, "/")
	if !nested {
		t[dir] = content
		return
	}
	sub, ok := t[dir].(gitTree)
	if !ok {
		sub = gitTree{}
		t[dir] = sub
	}
	sub.add(rest, content)
}

// hash writes the tree's objects' ids as git computes them and returns
// the tree's.
func (t gitTree) hash() []byte {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	// git sorts a tree's entries by name, a directory's as if it ended
	// in "/".
	key := func(n string) string {
		if _, ok := t[n].(gitTree); ok {
			return n + "/"
		}
		return n
	}
	sort.Slice(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })
	var b bytes.Buffer
	for _, n := range names {
		switch v := t[n].(type) {
		case string:
			fmt.Fprintf(&b, "100644 %s\x00", n)
			b.Write(gitObject("blob", []byte(v)))
		case gitTree:
			fmt.Fprintf(&b, "40000 %s\x00", n)
			b.Write(v.hash())
		}
	}
	return gitObject("tree", b.Bytes())
}

func gitCommit(tree []byte, parent, ident string, c fixture.Commit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tree %x\n", tree)
	if parent != "" {
		fmt.Fprintf(&b, "parent %s\n", parent)
	}
	when := fmt.Sprintf("%d +0000", c.Date.Unix())
	fmt.Fprintf(&b, "author %s %s\ncommitter %s %s\n\n%s\n", ident, when, ident, when, c.Message)
	return hex.EncodeToString(gitObject("commit", []byte(b.String())))
}

func gitObject(kind string, data []byte) []byte {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(data))
	h.Write(data)
	return h.Sum(nil)
}
