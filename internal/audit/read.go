package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// File is the name of a session's audit log in its directory: one JSON
// event per line.
const File = "audit.jsonl"

// maxLine bounds one event of the log when it is read.
const maxLine = 4 << 20

// Each calls fn with each event of the log at path in order, as the JSON
// encoding of an api.AuditEvent; raw is valid only during the call. It
// reads the file as it is when Each begins (a missing file has no
// events), one event at a time, and leaves out a last line still being
// written. It stops at fn's first error and returns it; a line that is not
// JSON is an error naming its number.
func Each(ctx context.Context, path string, fn func(raw json.RawMessage) error) error {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return eachLine(ctx, io.LimitReader(f, st.Size()), fn)
}

// EachUpTo is Each over the first n bytes of the log at path: the events
// written before it was n bytes long (a restarted daemon counts those its
// predecessor wrote, and no later one).
func EachUpTo(ctx context.Context, path string, n int64, fn func(raw json.RawMessage) error) error {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer f.Close()
	return eachLine(ctx, io.LimitReader(f, max(n, 0)), fn)
}

// eachLine calls fn with each complete line of r, checking that it is
// valid JSON. A last line without a newline is an event still being
// written, and is left out.
func eachLine(ctx context.Context, r io.Reader, fn func(json.RawMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF {
			return len(data), nil, nil
		}
		return 0, nil, nil
	})
	for n := 1; sc.Scan(); n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line := sc.Bytes()
		if !json.Valid(line) {
			return fmt.Errorf("audit log line %d: not a JSON event", n)
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}
