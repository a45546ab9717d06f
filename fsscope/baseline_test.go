package fsscope

import (
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// allocated is the bytes f allocates, averaged over a few calls.
func allocated(t *testing.T, f func() error) uint64 {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	const runs = 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// TestSmallStateWritesAllocateLittle: a session's workspace state and a
// small workspace's baseline are written several times in its life; each
// write made a 64 KiB buffer whatever it held (about 160 KiB a session
// in the soak's heap profile). A small file's write allocates a few KiB;
// what it writes is unchanged.
func TestSmallStateWritesAllocateLittle(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	v := map[string]any{"mode": "overlay", "review": false, "masks": []string{"a", "b"}}
	if n := allocated(t, func() error { return writeJSONAtomic(state, v) }); n > 16<<10 {
		t.Errorf("writeJSONAtomic of a small value allocated %d bytes; want at most 16 KiB", n)
	}
	base := filepath.Join(dir, "baseline.jsonl")
	entries := []entry{{Path: "", Mode: sIFDIR | 0o755}, {Path: "a", Mode: sIFREG | 0o644, Size: 3}, {Path: "b", Mode: sIFLNK | 0o777, Link: "a"}}
	if n := allocated(t, func() error { return writeBaseline(base, entries) }); n > 16<<10 {
		t.Errorf("writeBaseline of %d entries allocated %d bytes; want at most 16 KiB", len(entries), n)
	}
	b, err := readBaseline(base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.entries, entries) {
		t.Errorf("baseline read back %+v, want %+v", b.entries, entries)
	}
}
