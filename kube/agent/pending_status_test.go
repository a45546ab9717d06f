package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// A push of 17 ref updates listed 16 refs and nothing said one was
// missing: the update that mattered (refs/heads/main, last) was invisible
// to whoever decided through a SessionApproval. RefsCount says how many.
func TestPendingRefsCounted(t *testing.T) {
	var refs []string
	for i := range 16 {
		refs = append(refs, fmt.Sprintf("refs/heads/feature-%d", i))
	}
	refs = append(refs, "refs/heads/main")
	p := pendingApproval(api.Approval{ID: "x", Method: "POST", Host: "git.test", Path: "/r.git/git-receive-pack", Refs: refs})
	shown := strings.Join(p.Refs, " ")
	if !strings.Contains(shown, "refs/heads/main") && int(p.RefsCount) != len(refs) {
		t.Errorf("push of %d refs shown as %d refs, refs/heads/main not among them, and no field says refs were left out: %+v", len(refs), len(p.Refs), p)
	}
	if int(p.RefsCount) != len(refs) || len(p.Refs) >= len(refs) {
		t.Errorf("refs: %d listed, count %d; want fewer than %d listed and the count %d", len(p.Refs), p.RefsCount, len(refs), len(refs))
	}
}

// A query under 1 KiB whose escaping makes it longer than 1 KiB was cut
// (the part after the padding not shown) with QueryTruncated false.
func TestPendingQueryCutSaysSo(t *testing.T) {
	q := strings.Repeat("\u0085", 300) + "&action=delete-everything" // 625 bytes, escaped 1825
	p := pendingApproval(api.Approval{ID: "x", Method: "GET", Host: "h", Path: "/", Query: q})
	if strings.Contains(p.Query, "delete") {
		return
	}
	if !p.QueryTruncated {
		t.Errorf("query of %d bytes shown cut (%d bytes, without its end) and QueryTruncated false", len(q), len(p.Query))
	}
}

// Two queries that differ in one byte (0xfe vs 0xff, invalid UTF-8)
// showed the same once the status was JSON, and a literal "\u0085" as an
// escaped U+0085: queries are escaped byte by byte, the backslash too.
func TestPendingQueryUnambiguous(t *testing.T) {
	a := pendingApproval(api.Approval{ID: "a", Query: "op=\xfe"})
	b := pendingApproval(api.Approval{ID: "b", Query: "op=\xff"})
	ja, _ := json.Marshal(a.Query)
	jb, _ := json.Marshal(b.Query)
	if string(ja) == string(jb) {
		t.Errorf("queries %q and %q both shown as %s", "op=\xfe", "op=\xff", ja)
	}
	// And a literal backslash sequence looks like an escaped character.
	c := pendingApproval(api.Approval{ID: "c", Query: `x=\u0085`})
	d := pendingApproval(api.Approval{ID: "d", Query: "x=\u0085"})
	if c.Query == d.Query {
		t.Errorf("queries %q and %q both shown as %q", `x=\u0085`, "x=\u0085", c.Query)
	}
}

// 64 held requests (approvals.DefaultMaxPerSession) with fields a
// sandbox fills: the status as the API server stores it (encoding/json,
// which writes '&' '<' '>' as \u0026 ...) stays under etcd's 1.5 MiB, the
// requests left out counted.
func TestPendingStatusSizeBound(t *testing.T) {
	var st v1alpha1.SessionStatus
	held := loudHeld(time.Now())
	st.PendingApprovals, st.PendingApprovalsOmitted = pendingApprovals(held)
	if st.PendingApprovalsOmitted == 0 || len(st.PendingApprovals)+int(st.PendingApprovalsOmitted) != len(held) || len(st.PendingApprovals) == 0 {
		t.Errorf("%d listed, %d omitted, of %d held", len(st.PendingApprovals), st.PendingApprovalsOmitted, len(held))
	}
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status of 64 held requests: %d bytes as JSON", len(b))
	if len(b) > 1536*1024 {
		t.Errorf("status of 64 held requests is %d bytes as JSON, more than etcd's 1.5 MiB request limit: every status write fails while they are held", len(b))
	}
}

// Two held requests that differed only in Content-Encoding (the same
// bytes, gzip-decoded upstream or not) or in a header such as
// X-HTTP-Method-Override showed the same status entry but for the ID.
func TestPendingEncodingAndHeadersShown(t *testing.T) {
	base := api.Approval{Method: "POST", Host: "api.test", Path: "/v1/items/7", Rule: "ask POST api.test/*",
		ContentType: "application/json", Body: []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}}
	a, b, c := base, base, base
	a.ID, b.ID, c.ID = "a", "b", "c"
	b.ContentEncoding = "gzip"
	c.Headers = []api.HeaderField{{Name: "X-Http-Method-Override", Value: "DELETE"}}
	pa, pb, pc := pendingApproval(a), pendingApproval(b), pendingApproval(c)
	pa.ID, pb.ID, pc.ID = "", "", ""
	ja, _ := json.Marshal(pa)
	jb, _ := json.Marshal(pb)
	jc, _ := json.Marshal(pc)
	if string(ja) == string(jb) {
		t.Errorf("requests differing in Content-Encoding shown the same: %s", ja)
	}
	if string(ja) == string(jc) {
		t.Errorf("requests differing in X-HTTP-Method-Override shown the same: %s", ja)
	}
}

// loudHeld are 64 held requests (approvals.DefaultMaxPerSession) with
// every field a sandbox fills as long as it goes and full of '&', which
// JSON writes as six bytes.
func loudHeld(now time.Time) []api.Approval {
	amp := func(prefix string, n int) string { return prefix + strings.Repeat("&", n) }
	var refs []string
	for range 16 {
		refs = append(refs, amp("refs/heads/", 600))
	}
	var held []api.Approval
	for i := range 64 {
		held = append(held, api.Approval{
			ID: fmt.Sprintf("%016x", i), Method: "POST", Host: "git.test",
			Path: amp("/", 600), Query: amp("", 2000), ContentType: amp("a/", 200),
			Refs: refs, Body: []byte(amp("", 300)), Rule: "ask POST git.test/*",
			Headers: []api.HeaderField{{Name: amp("X-", 600), Value: "v"}},
			Created: now, Deadline: now.Add(time.Hour),
		})
	}
	return held
}
