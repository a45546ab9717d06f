package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// An approval's body is base64 in JSON, with its type and encoding; a
// request without one has none of these fields.
func TestApprovalBodyJSON(t *testing.T) {
	a := Approval{ID: "0123456789abcdef", Method: "POST", Body: []byte("\x1b[2J{\"names\":[]}"), BodyTruncated: true,
		ContentType: "application/json", ContentEncoding: "gzip"}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"body":"G1sySnsibmFtZXMiOltdfQ=="`, `"body_truncated":true`, `"content_type":"application/json"`, `"content_encoding":"gzip"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %s", b, want)
		}
	}
	var back Approval
	if err := json.Unmarshal(b, &back); err != nil || string(back.Body) != string(a.Body) || !back.BodyTruncated {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	b, _ = json.Marshal(Approval{ID: "0123456789abcdef"})
	for _, field := range []string{"body", "content_type", "content_encoding"} {
		if strings.Contains(string(b), `"`+field) {
			t.Errorf("%s: field %s without a body", b, field)
		}
	}
}
