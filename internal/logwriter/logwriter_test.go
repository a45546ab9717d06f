package logwriter

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args    []string
		dir     string
		limit   int64
		wantErr bool
	}{
		{args: []string{Arg, "/d"}, dir: "/d", limit: DefaultLimit},
		{args: []string{Arg, "/d", SizeArg, "4096"}, dir: "/d", limit: 4096},
		{args: []string{SizeArg, "4096", Arg, "/d"}, dir: "/d", limit: 4096},
		{args: []string{SizeArg, "0", Arg, "/d"}, wantErr: true},
		{args: []string{SizeArg, "-1", Arg, "/d"}, wantErr: true},
		{args: []string{SizeArg, "x", Arg, "/d"}, wantErr: true},
		{args: []string{Arg}, wantErr: true},
		{args: []string{SizeArg, "1"}, wantErr: true},
		{args: []string{"other", "x", Arg, "/d"}, wantErr: true},
		{args: nil, wantErr: true},
		{args: []string{Arg, "/d", TTYArg, "1"}, dir: "/d", limit: DefaultLimit},
		{args: []string{Arg, "/d", TTYArg, "yes"}, wantErr: true},
	}
	for _, tc := range cases {
		dir, limit, err := ParseArgs(tc.args)
		if (err != nil) != tc.wantErr || err == nil && (dir != tc.dir || limit != tc.limit) {
			t.Errorf("ParseArgs(%q) = %q, %d, %v; want %q, %d, error %v", tc.args, dir, limit, err, tc.dir, tc.limit, tc.wantErr)
		}
	}
}

// pipe returns a pipe fed with data by a goroutine; the reader is a file,
// as the shim's are, so the copy splices.
func pipe(t *testing.T, data []byte) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	go func() {
		_, _ = w.Write(data)
		w.Close()
	}()
	return r
}

func TestCapTruncatesAndSaysSo(t *testing.T) {
	const limit = 200 << 10
	dir := t.TempDir()
	flood := bytes.Repeat([]byte("y\n"), 3*limit/2) // 3x the cap
	if err := copyLogs(dir, limit, pipe(t, flood), pipe(t, nil), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, StdoutLog))
	kept, _, _ := bytes.Cut(out, []byte("[airlock:"))
	if !bytes.Equal(kept, flood[:limit]) {
		t.Errorf("%d bytes kept before the marker, want the first %d of the output", len(kept), limit)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("stdout has %d lines", len(lines))
	}
	cut, last := lines[len(lines)-2], lines[len(lines)-1]
	if !strings.HasPrefix(cut, "[airlock: output truncated") || !strings.Contains(cut, "the rest of stdout is dropped") {
		t.Errorf("truncation marker line = %q", cut)
	}
	var d Dropped
	j, err := os.ReadFile(filepath.Join(dir, StdoutLog+DroppedSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &d); err != nil {
		t.Fatal(err)
	}
	if !d.Final || d.Limit != limit || d.Written != limit || d.Written+d.Dropped != int64(len(flood)) {
		t.Errorf("dropped record %+v: want final, limit %d, written+dropped = %d", d, limit, len(flood))
	}
	if want := "[airlock: " + itoa(d.Dropped) + " bytes of stdout dropped]"; last != want {
		t.Errorf("last line = %q, want %q", last, want)
	}
	if _, err := os.Stat(filepath.Join(dir, StderrLog+DroppedSuffix)); err == nil {
		t.Error("stderr, under the cap, has a dropped record")
	}
	for _, name := range []string{StdoutLog, StderrLog} {
		if _, err := os.Stat(filepath.Join(dir, name+EOFSuffix)); err != nil {
			t.Errorf("%s: no EOF marker: %v", name, err)
		}
	}
}

func TestCapCountsEarlierOutput(t *testing.T) {
	// A logger restarted on the same directory appends: what is there
	// already counts.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StdoutLog), bytes.Repeat([]byte("x"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copyLogs(dir, 1500, pipe(t, bytes.Repeat([]byte("z"), 1000)), pipe(t, nil), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, StdoutLog))
	kept, _, _ := bytes.Cut(out, []byte("[airlock:"))
	if n := bytes.Count(kept, []byte("z")); n != 500 {
		t.Errorf("%d new bytes kept, want 500", n)
	}
	if !bytes.Contains(out, []byte("z\n[airlock: output truncated")) {
		t.Errorf("the marker does not start its own line: %q", out[len(out)-200:])
	}
}

func TestNoCapReachedNoMarker(t *testing.T) {
	dir := t.TempDir()
	data := []byte("hello\n")
	if err := copyLogs(dir, 1<<20, pipe(t, data), pipe(t, nil), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, StdoutLog))
	if !bytes.Equal(out, data) {
		t.Errorf("stdout = %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, StdoutLog+DroppedSuffix)); err == nil {
		t.Error("a dropped record without truncation")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestCapIsShared(t *testing.T) {
	// Both streams flood: together they keep exactly the cap.
	const limit = 100 << 10
	dir := t.TempDir()
	flood := bytes.Repeat([]byte("x"), limit)
	if err := copyLogs(dir, limit, pipe(t, flood), pipe(t, flood), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	var kept, written, dropped int64
	for _, name := range []string{StdoutLog, StderrLog} {
		out, _ := os.ReadFile(filepath.Join(dir, name))
		k, _, _ := bytes.Cut(out, []byte("[airlock:"))
		k = bytes.TrimSuffix(k, []byte("\n")) // the marker's own line start
		kept += int64(len(k))
		var d Dropped
		if j, err := os.ReadFile(filepath.Join(dir, name+DroppedSuffix)); err == nil {
			if err := json.Unmarshal(j, &d); err != nil {
				t.Fatal(err)
			}
		} else {
			d.Written = int64(len(k))
		}
		written += d.Written
		dropped += d.Dropped
	}
	if kept != limit || written != limit || dropped != limit {
		t.Errorf("kept %d, written %d, dropped %d; want %d, %d, %d", kept, written, dropped, limit, limit, limit)
	}
}

// TestFullDiskKeepsReading: a stream whose writes fail (the disk is full;
// /dev/full fails every write with ENOSPC) is still read to its end, so
// the session's command is never held up by a pipe nobody drains.
func TestFullDiskKeepsReading(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("no /dev/full: %v", err)
	}
	defer full.Close()
	src := &countingReader{r: strings.NewReader(strings.Repeat("x", 1<<20))}
	var b budget
	b.left.Store(DefaultLimit)
	if err := copyStream(t.TempDir(), StdoutLog, full, src, &b, DefaultLimit); err != nil {
		t.Fatalf("copyStream onto a full disk: %v", err)
	}
	if src.n != 1<<20 {
		t.Errorf("read %d bytes of %d: the stream was not drained", src.n, 1<<20)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
