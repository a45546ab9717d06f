package fsscope

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The index is the one place in a git directory where a path is stored
// that git writes into the worktree without checking it the way it
// checks trees: git checkout -- . and git restore . write an index entry
// named .git/hooks/post-commit into the repository's hooks. So a changed
// index (or split-index shared index) commits only when every entry's
// path is one git would accept in a tree.

// gitIndexBadPath returns the first entry of an index file whose path git
// would refuse in a tree, or "". It reads the entries as both SHA-1 and
// SHA-256 repositories lay them out; a file that neither reads as is an
// error.
func gitIndexBadPath(data []byte) (string, error) {
	parsed := false
	var firstErr error
	for _, hashSize := range []int{20, 32} {
		names, err := gitIndexNames(data, hashSize)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		parsed = true
		for _, n := range names {
			if !gitTreePathOK(n) {
				return n, nil
			}
		}
	}
	if !parsed {
		return "", firstErr
	}
	return "", nil
}

// gitIndexNames reads the entry paths of an index file (versions 2 to 4)
// whose object ids are hashSize bytes long.
func gitIndexNames(data []byte, hashSize int) ([]string, error) {
	if len(data) < 12+hashSize || string(data[:4]) != "DIRC" {
		return nil, errors.New("not a git index")
	}
	version := binary.BigEndian.Uint32(data[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("index version %d", version)
	}
	count := binary.BigEndian.Uint32(data[8:12])
	end := len(data) - hashSize
	off := 12
	var names []string
	prev := ""
	for i := uint32(0); i < count; i++ {
		start := off
		off += 40 + hashSize
		if off+2 > end {
			return nil, errors.New("truncated index entry")
		}
		mode := binary.BigEndian.Uint32(data[start+24 : start+28])
		flags := binary.BigEndian.Uint16(data[off : off+2])
		off += 2
		if flags&0x4000 != 0 {
			if version < 3 {
				return nil, errors.New("extended flags in a version 2 index")
			}
			off += 2
		}
		nameLen := int(flags & 0xfff)
		var name string
		if version == 4 {
			strip, n := gitVarint(data[off:end])
			if n == 0 || strip > uint64(len(prev)) {
				return nil, errors.New("bad path prefix in index entry")
			}
			off += n
			nul := bytes.IndexByte(data[off:end], 0)
			if nul < 0 {
				return nil, errors.New("unterminated index entry path")
			}
			name = prev[:len(prev)-int(strip)] + string(data[off:off+nul])
			off += nul + 1
		} else {
			nul := bytes.IndexByte(data[off:end], 0)
			if nul < 0 || nameLen < 0xfff && nul != nameLen {
				return nil, errors.New("bad index entry path length")
			}
			name = string(data[off : off+nul])
			// Entries are padded with 1 to 8 NULs to a multiple of 8.
			size := (off - start + nul + 8) &^ 7
			if start+size > end {
				return nil, errors.New("truncated index entry")
			}
			for _, b := range data[off+nul : start+size] {
				if b != 0 {
					return nil, errors.New("bad index entry padding")
				}
			}
			off = start + size
		}
		if nameLen < 0xfff && len(name) != nameLen {
			return nil, errors.New("bad index entry path length")
		}
		prev = name
		if mode&sIFMT == sIFDIR {
			// A sparse index's directory entry ends in "/".
			name = strings.TrimSuffix(name, "/")
		}
		names = append(names, name)
	}
	return names, nil
}

// gitVarint decodes git's offset varint, returning the value and the
// number of bytes read (0 on error).
func gitVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	val := uint64(c & 127)
	n := 1
	for c&128 != 0 {
		if n >= len(b) || n > 9 {
			return 0, 0
		}
		val++
		c = b[n]
		n++
		val = val<<7 + uint64(c&127)
	}
	return val, n
}

// gitTreePathOK reports whether git would accept p as a path in a tree
// (its verify_path, with the NTFS and HFS spellings of .git refused
// everywhere): no empty, ".", ".." or .git component.
func gitTreePathOK(p string) bool {
	if p == "" {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "", ".", "..":
			return false
		}
		// ".git", ".GIT", ".git." or ".git " (NTFS), and with ignorable
		// Unicode code points (HFS+) stripped.
		if strings.EqualFold(strings.TrimRight(stripHFSIgnorable(el), ". "), ".git") || strings.EqualFold(el, "git~1") {
			return false
		}
	}
	return true
}

// stripHFSIgnorable removes the code points HFS+ ignores in names (zero
// width joiners and the like), as git's is_hfs_dotgit does.
func stripHFSIgnorable(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case 0x200c, 0x200d, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e,
			0x206a, 0x206b, 0x206c, 0x206d, 0x206e, 0x206f, 0xfeff:
			return -1
		}
		return r
	}, s)
}
