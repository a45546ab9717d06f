package fsscope

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// File type bits of st_mode.
const (
	sIFMT    = 0o170000
	sIFREG   = 0o100000
	sIFDIR   = 0o040000
	sIFLNK   = 0o120000
	sIFCHR   = 0o020000
	sIFBLK   = 0o060000
	sIFIFO   = 0o010000
	sIFSOCK  = 0o140000
	permMask = 0o7777
)

// entry is what a session saw of one host path when it started: enough to
// tell later whether the path changed on the host (conflict detection).
type entry struct {
	Path  string `json:"p"` // relative to the workspace root; "" is the root
	Mode  uint32 `json:"m"` // st_mode: type and permission bits
	UID   uint32 `json:"u"`
	GID   uint32 `json:"g"`
	Size  int64  `json:"s"`
	Ino   uint64 `json:"i"`
	Nlink uint64 `json:"n"`
	Mtime int64  `json:"t"` // nanoseconds
	Ctime int64  `json:"c"`
	Link  string `json:"l,omitempty"` // symlink target
	// Hash is the SHA-256 of a regular file's content, recorded when the
	// filesystem's timestamps are too coarse to show a rewrite.
	Hash string `json:"h,omitempty"`
	// Mount marks a mount point: what is mounted there is not part of the
	// workspace (overlayfs and the sandbox's binds show the directory below).
	Mount bool `json:"mp,omitempty"`
}

func (e *entry) isDir() bool     { return e.Mode&sIFMT == sIFDIR }
func (e *entry) isRegular() bool { return e.Mode&sIFMT == sIFREG }
func (e *entry) isSymlink() bool { return e.Mode&sIFMT == sIFLNK }

// fileType names the type bits of a mode for people.
func fileType(mode uint32) string {
	switch mode & sIFMT {
	case sIFREG:
		return TypeFile
	case sIFDIR:
		return TypeDir
	case sIFLNK:
		return TypeSymlink
	case sIFCHR, sIFBLK:
		return TypeDevice
	case sIFIFO:
		return TypeFIFO
	case sIFSOCK:
		return TypeSocket
	}
	return "unknown"
}

// baseline is the snapshot of one workspace taken at Setup.
type baseline struct {
	entries []entry
	index   map[string]int
}

func newBaseline(entries []entry) *baseline {
	b := &baseline{entries: entries, index: make(map[string]int, len(entries))}
	for i := range entries {
		b.index[entries[i].Path] = i
	}
	return b
}

// get returns the entry for rel, or nil when the session did not see it.
func (b *baseline) get(rel string) *entry {
	if i, ok := b.index[rel]; ok {
		return &b.entries[i]
	}
	return nil
}

// set replaces or adds the entry for e.Path (after a commit changed it).
func (b *baseline) set(e entry) {
	if i, ok := b.index[e.Path]; ok {
		b.entries[i] = e
		return
	}
	b.index[e.Path] = len(b.entries)
	b.entries = append(b.entries, e)
}

// remove forgets rel (after a commit deleted it).
func (b *baseline) remove(rel string) {
	i, ok := b.index[rel]
	if !ok {
		return
	}
	delete(b.index, rel)
	last := len(b.entries) - 1
	if i != last {
		b.entries[i] = b.entries[last]
		b.index[b.entries[i].Path] = i
	}
	b.entries = b.entries[:last]
}

// children returns the entries strictly beneath dir ("" is the root).
func (b *baseline) children(dir string) []entry {
	prefix := dir + "/"
	if dir == "" {
		prefix = ""
	}
	var out []entry
	for _, e := range b.entries {
		if e.Path != "" && e.Path != dir && strings.HasPrefix(e.Path, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// underMount reports whether rel lies beneath a mount point of the
// workspace (and so was never visible to the session).
func (b *baseline) underMount(rel string) bool {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if e := b.get(d); e != nil && e.Mount {
			return true
		}
	}
	return false
}

// writeBaseline stores entries as JSON lines, atomically.
func writeBaseline(file string, entries []entry) error {
	return writeFileAtomic(file, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, bufferSize(int64(len(entries))*entryBytes))
		enc := json.NewEncoder(bw)
		for i := range entries {
			if err := enc.Encode(&entries[i]); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

func readBaseline(file string) (*baseline, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var entries []entry
	size := int64(maxBuffer)
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	dec := json.NewDecoder(bufio.NewReaderSize(f, bufferSize(size)))
	for {
		var e entry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read baseline %s: %w", file, err)
		}
		entries = append(entries, e)
	}
	return newBaseline(entries), nil
}

// writeFileAtomic writes file through a temporary file in the same
// directory, fsyncs it and renames it into place.
func writeFileAtomic(file string, write func(io.Writer) error) (retErr error) {
	dir, base := path.Split(file)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func writeJSONAtomic(file string, v any) error {
	return writeFileAtomic(file, func(w io.Writer) error {
		// The encoder encodes the whole value, then writes it at once.
		return json.NewEncoder(w).Encode(v)
	})
}

// A baseline's buffers are sized to the file, up to maxBuffer: a large
// workspace's baseline is written and read in few system calls, while a
// small one, written several times in every session's life, does not
// make a 64 KiB buffer each time.
const (
	minBuffer = 4 << 10
	maxBuffer = 64 << 10
	// entryBytes is about what one entry takes in the file.
	entryBytes = 128
)

func bufferSize(size int64) int {
	return int(min(max(size, minBuffer), maxBuffer))
}
