package fsscope

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/policies"
)

// maxTextDiff is the largest file UnifiedDiff shows line by line.
const maxTextDiff = 8 << 20

// UnifiedDiff writes the change set as a unified diff, git style: paths
// are sandbox paths (a/workspace/x, b/workspace/x), text files get hunks,
// binary files "Binary files ... differ", and mode, type, symlink and
// rename changes their header lines. A name that has a control
// character, a quote, a backslash or a character that is not printable is
// quoted in them (see diffName), so the sandbox's names cannot add lines.
func (s *Session) UnifiedDiff(ctx context.Context, w io.Writer) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	release, err := s.ensureUpperLocked()
	if err != nil {
		return err
	}
	defer release()
	for i, ws := range s.st.Workspaces {
		if ws.Mode != policies.ModeOverlay {
			continue
		}
		changes, err := s.diffWorkspaceLocked(ctx, i)
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			continue
		}
		upper, err := openTree(filepath.Join(s.wsUpper(i), "upper"))
		if err != nil {
			return err
		}
		host, err := openTree(ws.HostPath)
		if err != nil {
			upper.Close()
			return err
		}
		hidden := s.st.Workspaces[i].hiddenPaths()
		for _, c := range changes {
			if err := ctx.Err(); err != nil {
				break
			}
			masked := hidden(c.Path) || (c.OldPath != "" && hidden(c.OldPath))
			if err = writeChange(w, ws.Target, c, host, upper, masked); err != nil {
				break
			}
		}
		upper.Close()
		host.Close()
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// gitMode renders a type and permission bits as git does (100644, 120000).
func gitMode(typ string, perm uint32) string {
	switch typ {
	case TypeDir:
		return fmt.Sprintf("040%03o", perm&0o777)
	case TypeSymlink:
		return "120000"
	case TypeFile:
		return fmt.Sprintf("100%03o", perm&0o777)
	}
	return fmt.Sprintf("%s %04o", typ, perm)
}

// writeChange writes one change; of a path whose host content the
// sandbox was never shown (masked: see hiddenPaths) it writes the
// sandbox's side in full and never the host's.
//
// The sandbox names its files: every name in a header line goes through
// diffName, so that none can start a line or hide what it is.
func writeChange(w io.Writer, target string, c Change, host, upper *tree, masked bool) error {
	bPath := path.Join(target, c.Path)
	aPath := bPath
	if c.OldPath != "" {
		aPath = path.Join(target, c.OldPath)
	}
	a, b := diffName("a", aPath), diffName("b", bPath)
	if _, err := fmt.Fprintf(w, "diff --airlock %s %s\n", a, b); err != nil {
		return err
	}
	var oldText, newText string
	var hasOld, hasNew bool
	var err error
	readOld := func(typ, link string) {
		hasOld = true
		switch typ {
		case TypeSymlink:
			oldText = link
		case TypeFile:
			if masked {
				return // never read: see below
			}
			oldText, err = readText(host, c.Path, c.Binary)
		default:
			hasOld = false
		}
	}
	readNew := func() {
		hasNew = true
		switch c.Type {
		case TypeSymlink:
			newText = c.LinkTarget
		case TypeFile:
			newText, err = readText(upper, c.Path, c.Binary)
		default:
			hasNew = false
		}
	}
	switch c.Kind {
	case KindAdded:
		fmt.Fprintf(w, "new file mode %s\n", gitMode(c.Type, c.Mode))
		readNew()
	case KindDeleted:
		fmt.Fprintf(w, "deleted file mode %s\n", gitMode(c.Type, c.Mode))
		readOld(c.Type, c.LinkTarget)
	case KindMode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", gitMode(c.Type, c.OldMode), gitMode(c.Type, c.Mode))
	case KindModified:
		if c.OldMode != c.Mode {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", gitMode(c.Type, c.OldMode), gitMode(c.Type, c.Mode))
		}
		readOld(c.Type, "")
		readNew()
	case KindSymlink:
		readOld(TypeSymlink, c.OldLink)
		readNew()
	case KindRenamed:
		if c.OldMode != c.Mode {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", gitMode(c.Type, c.OldMode), gitMode(c.Type, c.Mode))
		}
		_, err := fmt.Fprintf(w, "similarity index 100%%\nrename from %s\nrename to %s\n", diffName("", aPath), diffName("", bPath))
		return err
	case KindType:
		fmt.Fprintf(w, "deleted file mode %s\nnew file mode %s\n", gitMode(c.OldType, c.OldMode), gitMode(c.Type, c.Mode))
		readOld(c.OldType, c.OldLink)
		readNew()
	}
	if err != nil {
		return err
	}
	if !hasOld && !hasNew {
		return nil
	}
	if masked && hasOld {
		// deny_read hides the host's side; the sandbox's is its own.
		if _, err := fmt.Fprintf(w, "(deny_read: the host's content of %s is not shown)\n", a); err != nil {
			return err
		}
		hasOld, oldText = false, ""
		if !hasNew {
			return nil
		}
	}
	if c.Binary {
		if !hasOld {
			a = "/dev/null"
		}
		if !hasNew {
			b = "/dev/null"
		}
		_, err := fmt.Fprintf(w, "Binary files %s and %s differ\n", a, b)
		return err
	}
	if len(oldText) > maxTextDiff || len(newText) > maxTextDiff {
		_, err := fmt.Fprintf(w, "Files %s and %s differ (too large to show)\n", a, b)
		return err
	}
	from, to := a, b
	if !hasOld {
		from = "/dev/null"
	}
	if !hasNew {
		to = "/dev/null"
	}
	if oldText == newText {
		return nil
	}
	if _, err := fmt.Fprintf(w, "--- %s\n+++ %s\n", from, to); err != nil {
		return err
	}
	return unifiedText(w, oldText, newText)
}

// readText reads a file for the diff; binary files are not read.
func readText(t *tree, rel string, binary bool) (string, error) {
	if binary {
		return "", nil
	}
	data, err := readTreeFile(t, rel, maxTextDiff+1)
	return string(data), err
}
