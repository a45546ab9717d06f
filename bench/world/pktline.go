package world

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// refUpdate is one command of a push: move Ref from Old to New. A New of
// all zeros deletes the ref, an Old of all zeros creates it.
type refUpdate struct {
	Old, New, Ref string
}

func (u refUpdate) isDelete() bool { return isZeroID(u.New) }

func isZeroID(id string) bool { return strings.Trim(id, "0") == "" }

// pushRequest is the command section of a receive-pack request.
type pushRequest struct {
	Updates []refUpdate
	Caps    map[string]bool
}

// maxPktLen is the largest pkt-line, length prefix included.
const maxPktLen = 65520

// readPkt reads one pkt-line from b and returns its payload (nil for a
// flush packet) and the rest of b.
func readPkt(b []byte) (payload, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, io.ErrUnexpectedEOF
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return nil, nil, fmt.Errorf("bad pkt-line length %q", b[:4])
	}
	switch {
	case n == 0:
		return nil, b[4:], nil
	case n < 4 || n > maxPktLen:
		return nil, nil, fmt.Errorf("bad pkt-line length %d", n)
	case int(n) > len(b):
		return nil, nil, io.ErrUnexpectedEOF
	}
	return b[4:n], b[n:], nil
}

// parsePushRequest parses the command list at the start of a
// git-receive-pack request body (protocol v0/v1): optional "shallow"
// lines, then "old new ref" lines (the first one followed by NUL and the
// capabilities), then a flush packet. What follows (push options, the
// pack) is not looked at. Push certificates are refused.
func parsePushRequest(body []byte) (pushRequest, error) {
	req := pushRequest{Caps: map[string]bool{}}
	rest := body
	first := true
	for {
		payload, next, err := readPkt(rest)
		if err != nil {
			return req, fmt.Errorf("push commands: %w", err)
		}
		rest = next
		if payload == nil {
			break
		}
		line := string(bytes.TrimSuffix(payload, []byte("\n")))
		if strings.HasPrefix(line, "shallow ") {
			continue
		}
		if strings.HasPrefix(line, "push-cert") {
			return req, errors.New("push certificates are not supported")
		}
		if first {
			var caps string
			line, caps, _ = strings.Cut(line, "\x00")
			for _, c := range strings.Fields(caps) {
				req.Caps[c] = true
			}
			first = false
		}
		f := strings.Split(line, " ")
		if len(f) != 3 || !isObjectID(f[0]) || !isObjectID(f[1]) || len(f[0]) != len(f[1]) || !validRefName(f[2]) {
			return req, fmt.Errorf("push commands: bad command %q", line)
		}
		req.Updates = append(req.Updates, refUpdate{Old: f[0], New: f[1], Ref: f[2]})
	}
	if len(req.Updates) == 0 {
		return req, errors.New("push commands: no ref updates")
	}
	return req, nil
}

// validRefName accepts a full ref name without control characters; git
// itself checks the rest of its rules.
func validRefName(s string) bool {
	if !strings.HasPrefix(s, "refs/") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// appendPkt appends payload as one pkt-line.
func appendPkt(b []byte, payload string) []byte {
	b = fmt.Appendf(b, "%04x", len(payload)+4)
	return append(b, payload...)
}

// pushRefusal renders receive-pack's answer to a push that is refused
// whole: with report-status (v1 or v2), "unpack ok" and an "ng" line per
// ref with its reason; with side-band, that report on band 1, preceded by
// message on band 2 (git prints it as "remote: ...").
func pushRefusal(req pushRequest, reasons map[string]string, message string) []byte {
	var report []byte
	if req.Caps["report-status"] || req.Caps["report-status-v2"] {
		report = appendPkt(report, "unpack ok\n")
		for _, u := range req.Updates {
			report = appendPkt(report, "ng "+u.Ref+" "+oneLine(reasons[u.Ref])+"\n")
		}
		report = append(report, "0000"...)
	}
	max := 0
	switch {
	case req.Caps["side-band-64k"]:
		max = maxPktLen - 5
	case req.Caps["side-band"]:
		max = 1000 - 5
	default:
		return report
	}
	var out []byte
	band := func(n byte, data []byte) {
		for len(data) > 0 {
			chunk := data[:min(len(data), max)]
			data = data[len(chunk):]
			out = appendPkt(out, string(append([]byte{n}, chunk...)))
		}
	}
	if message != "" {
		band(2, []byte(oneLine(message)+"\n"))
	}
	band(1, report)
	return append(out, "0000"...)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
