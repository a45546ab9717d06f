package world

import (
	"bytes"
	"strings"
	"testing"
	"testing/fstest"
)

const (
	id1  = "44ef26b636da9fbf8ec3f9cc44f4316b7dffe380"
	id2  = "cea307f3adfe5b4c7963b5c4c443c57467e040ff"
	zero = "0000000000000000000000000000000000000000"
)

func pkts(lines ...string) []byte {
	var b []byte
	for _, l := range lines {
		if l == "" {
			b = append(b, "0000"...)
			continue
		}
		b = appendPkt(b, l)
	}
	return b
}

func TestParsePushRequest(t *testing.T) {
	tests := []struct {
		name    string
		body    []byte
		want    []refUpdate
		caps    []string
		wantErr string
	}{
		{
			name: "delete with capabilities",
			body: append(pkts(id1+" "+zero+" refs/heads/alex/x\x00report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.39.5\n", ""), "PACK..."...),
			want: []refUpdate{{id1, zero, "refs/heads/alex/x"}},
			caps: []string{"report-status-v2", "side-band-64k", "quiet"},
		},
		{
			name: "several updates, shallow line",
			body: pkts("shallow "+id2+"\n", zero+" "+id1+" refs/heads/new\x00report-status\n", id1+" "+id2+" refs/heads/main\n", id2+" "+zero+" refs/tags/v1", ""),
			want: []refUpdate{{zero, id1, "refs/heads/new"}, {id1, id2, "refs/heads/main"}, {id2, zero, "refs/tags/v1"}},
			caps: []string{"report-status"},
		},
		{name: "empty", body: nil, wantErr: "unexpected EOF"},
		{name: "flush only", body: pkts(""), wantErr: "no ref updates"},
		{name: "no flush", body: pkts(id1 + " " + zero + " refs/heads/x\n"), wantErr: "unexpected EOF"},
		{name: "bad length", body: []byte("zzzz"), wantErr: "bad pkt-line length"},
		{name: "length too small", body: []byte("0003"), wantErr: "bad pkt-line length"},
		{name: "truncated", body: []byte("00ffabc"), wantErr: "unexpected EOF"},
		{name: "short id", body: pkts("abc "+zero+" refs/heads/x\n", ""), wantErr: "bad command"},
		{name: "not a ref", body: pkts(id1+" "+zero+" HEAD\n", ""), wantErr: "bad command"},
		{name: "extra field", body: pkts(id1+" "+zero+" refs/heads/x y\n", ""), wantErr: "bad command"},
		{name: "control character in ref", body: pkts(id1+" "+zero+" refs/heads/x\n", id1+" "+zero+" refs/heads/y\x00z\n", ""), wantErr: "bad command"},
		{name: "push cert", body: pkts("push-cert\x00report-status\n", ""), wantErr: "push certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePushRequest(tt.body)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Updates) != len(tt.want) {
				t.Fatalf("updates %v, want %v", got.Updates, tt.want)
			}
			for i := range tt.want {
				if got.Updates[i] != tt.want[i] {
					t.Errorf("update %d: %v, want %v", i, got.Updates[i], tt.want[i])
				}
			}
			for _, c := range tt.caps {
				if !got.Caps[c] {
					t.Errorf("capability %q missing: %v", c, got.Caps)
				}
			}
		})
	}
}

func FuzzParsePushRequest(f *testing.F) {
	f.Add(pkts(id1+" "+zero+" refs/heads/alex/x\x00report-status side-band-64k\n", ""))
	f.Add(pkts("shallow "+id2+"\n", zero+" "+id1+" refs/heads/new\n", ""))
	f.Add([]byte("0000"))
	f.Add([]byte("00ffabc"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parsePushRequest(body)
		if err != nil {
			return
		}
		if len(req.Updates) == 0 {
			t.Fatal("success without updates")
		}
		for _, u := range req.Updates {
			if !isObjectID(u.Old) || !isObjectID(u.New) || !strings.HasPrefix(u.Ref, "refs/") || strings.ContainsAny(u.Ref, " \x00\n\r\t") {
				t.Fatalf("bad update accepted: %q", u)
			}
		}
		// A refusal for any accepted request is well-formed pkt-lines.
		req.Caps["report-status"], req.Caps["side-band-64k"] = true, true
		out := pushRefusal(req, map[string]string{}, "denied")
		for rest := out; len(rest) > 0; {
			p, next, err := readPkt(rest)
			if err != nil {
				t.Fatalf("refusal is not pkt-lines: %v", err)
			}
			if p == nil && len(next) != 0 {
				t.Fatalf("data after the final flush")
			}
			rest = next
		}
	})
}

func TestPushRefusal(t *testing.T) {
	req := pushRequest{
		Updates: []refUpdate{{id1, zero, "refs/heads/a"}, {id2, zero, "refs/heads/b"}},
		Caps:    map[string]bool{"report-status-v2": true},
	}
	reasons := map[string]string{"refs/heads/a": "denied\nhere", "refs/heads/b": "other"}
	plain := pushRefusal(req, reasons, "msg")
	if want := pkts("unpack ok\n", "ng refs/heads/a denied here\n", "ng refs/heads/b other\n", ""); !bytes.Equal(plain, want) {
		t.Errorf("without side-band:\n got %q\nwant %q", plain, want)
	}
	req.Caps["side-band-64k"] = true
	banded := pushRefusal(req, reasons, "msg")
	want := pkts("\x02msg\n", "\x01"+string(plain), "")
	if !bytes.Equal(banded, want) {
		t.Errorf("with side-band:\n got %q\nwant %q", banded, want)
	}
	delete(req.Caps, "report-status-v2")
	if got := pushRefusal(req, reasons, ""); !bytes.Equal(got, []byte("0000")) {
		t.Errorf("no report requested: %q", got)
	}
}

func TestReadRefs(t *testing.T) {
	fsys := fstest.MapFS{
		"packed-refs": {Data: []byte("# pack-refs with: peeled fully-peeled sorted\n" +
			id1 + " refs/heads/main\n" + id2 + " refs/tags/v1\n^" + id1 + "\n" + id1 + " refs/heads/gone\n")},
		"refs/heads/main":          {Data: []byte(id2 + "\n")}, // loose wins
		"refs/heads/alex/x":        {Data: []byte(id1)},
		"refs/heads/alex/y.lock":   {Data: []byte("junk")},
		"refs/remotes/origin/HEAD": {Data: []byte("ref: refs/remotes/origin/main\n")},
	}
	all, err := readRefs(fsys, "refs/")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"refs/heads/main": id2, "refs/heads/alex/x": id1, "refs/tags/v1": id2, "refs/heads/gone": id1}
	if len(all) != len(want) {
		t.Fatalf("refs %v, want %v", all, want)
	}
	for k, v := range want {
		if all[k] != v {
			t.Errorf("%s = %q, want %s", k, all[k], v)
		}
	}
	heads, err := readRefs(fsys, "refs/heads/")
	if err != nil || len(heads) != 3 {
		t.Errorf("heads: %v, %v", heads, err)
	}
	if _, err := readRefs(fstest.MapFS{"refs/heads/x": {Data: []byte("nonsense")}}, "refs/"); err == nil {
		t.Error("bad loose ref accepted")
	}
	if _, err := readRefs(fstest.MapFS{"packed-refs": {Data: []byte("nonsense\n")}}, "refs/"); err == nil {
		t.Error("bad packed-refs accepted")
	}
	if refs, err := readRefs(fstest.MapFS{}, "refs/heads/"); err != nil || len(refs) != 0 {
		t.Errorf("empty repository: %v, %v", refs, err)
	}
}

func FuzzParsePackedRefs(f *testing.F) {
	f.Add([]byte("# pack-refs with: peeled\n" + id1 + " refs/heads/main\n^" + id2 + "\n"))
	f.Add([]byte(id1 + " refs/heads/a b\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs := map[string]string{}
		if err := parsePackedRefs(data, "refs/", refs); err != nil {
			return
		}
		for name, id := range refs {
			if !strings.HasPrefix(name, "refs/") || !isObjectID(id) {
				t.Fatalf("accepted %q -> %q", name, id)
			}
		}
	})
}
