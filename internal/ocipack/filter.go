package ocipack

import (
	"archive/tar"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// xattrPrefix marks the PAX records that carry extended attributes
// (file capabilities, for one). They are the only PAX records kept.
const xattrPrefix = "SCHILY.xattr."

// CleanName returns name as a clean path relative to the image root
// ("./usr/bin/" becomes "usr/bin"; "./" becomes "."). It refuses names that
// are empty, absolute, or that contain a ".." element anywhere, since such
// entries could write outside the root they are extracted into.
func CleanName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty tar entry name: %w", errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("tar entry %q: absolute path: %w", name, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("tar entry %q: NUL byte in name: %w", name, errdefs.ErrInvalidArgument)
	}
	for el := range strings.SplitSeq(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("tar entry %q: parent directory reference: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	return path.Clean(name), nil
}

// filter rewrites a root filesystem tar stream into a layer: entry names are
// cleaned, device nodes and FIFOs are dropped (the runtime provides /dev),
// metadata is reduced to what a layer needs, and modification times are
// truncated to seconds and clamped to a ceiling, when one is set, so that
// equal input gives equal output.
type filter struct {
	clamp time.Time // zero: no clamping

	// kept and dropped record the non-directory entries seen so far, so that
	// hard links can be checked against (or dropped with) their targets.
	kept    map[string]bool
	dropped map[string]bool
}

func newFilter(clamp time.Time) *filter {
	if !clamp.IsZero() {
		clamp = time.Unix(clamp.Unix(), 0).UTC()
	}
	return &filter{clamp: clamp, kept: map[string]bool{}, dropped: map[string]bool{}}
}

// header returns the header to write for in, or nil when the entry is
// dropped. An error means the stream is not a safe root filesystem.
func (f *filter) header(in *tar.Header) (*tar.Header, error) {
	name, err := CleanName(in.Name)
	if err != nil {
		return nil, err
	}
	if name == "." {
		// The root directory itself: its owner and mode belong to the
		// snapshot, not to the layer.
		return nil, nil
	}

	out := &tar.Header{
		Name:    name,
		Mode:    in.Mode & 0o7777,
		Uid:     in.Uid,
		Gid:     in.Gid,
		Uname:   in.Uname,
		Gname:   in.Gname,
		ModTime: f.modTime(in.ModTime),
	}
	for k, v := range in.PAXRecords {
		if strings.HasPrefix(k, xattrPrefix) {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}

	switch in.Typeflag {
	case tar.TypeDir:
		out.Typeflag = tar.TypeDir
		out.Name += "/"
		return out, nil
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA still occurs in old archives.
		out.Typeflag = tar.TypeReg
		out.Size = in.Size
	case tar.TypeSymlink:
		if in.Linkname == "" {
			return nil, fmt.Errorf("tar entry %q: symlink without a target: %w", in.Name, errdefs.ErrInvalidArgument)
		}
		// A symlink's target is resolved inside the container's root, so an
		// absolute or upward target is legitimate (usr/bin/awk ->
		// /etc/alternatives/awk). Extractors resolve it within the root.
		out.Typeflag = tar.TypeSymlink
		out.Linkname = in.Linkname
	case tar.TypeLink:
		target, err := CleanName(in.Linkname)
		if err != nil {
			return nil, fmt.Errorf("hard link %q: %w", in.Name, err)
		}
		if f.dropped[target] {
			f.dropped[name] = true
			return nil, nil
		}
		if !f.kept[target] {
			return nil, fmt.Errorf("hard link %q to %q: target not earlier in the archive: %w",
				in.Name, in.Linkname, errdefs.ErrInvalidArgument)
		}
		out.Typeflag = tar.TypeLink
		out.Linkname = target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		f.dropped[name] = true
		return nil, nil
	default:
		return nil, fmt.Errorf("tar entry %q: unsupported type %q: %w", in.Name, in.Typeflag, errdefs.ErrNotImplemented)
	}
	delete(f.dropped, name)
	f.kept[name] = true
	return out, nil
}

func (f *filter) modTime(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	t = time.Unix(t.Unix(), 0).UTC()
	if !f.clamp.IsZero() && t.After(f.clamp) {
		return f.clamp
	}
	return t
}
