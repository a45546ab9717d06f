package runner

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/suite"
)

func TestExternalSnapshots(t *testing.T) {
	x := &externals{dir: t.TempDir()}
	run := func(script string) (externalSnapshot, error) {
		x.list = []*suite.External{{Name: "inv", Pos: "suite.hcl:3", Reset: []string{"true"}, Snapshot: []string{"sh", "-c", script}, Timeout: 5 * time.Second}}
		return x.before(context.Background())
	}
	before, err := run(`echo '{"a": 1, "b": {"x": [1, 2]}, "c": "z"}'`)
	if err != nil {
		t.Fatal(err)
	}
	after, err := run(`echo '{"b": {"x": [1, 2, 3]}, "c": "z", "d": null}'`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range diffExternals("suite-desk", before, after) {
		got = append(got, e.Op+" "+e.Target)
	}
	want := []string{"delete-item inv/a", "modify-item inv/b", "create-item inv/d"}
	if !slices.Equal(got, want) {
		t.Errorf("effects %v, want %v", got, want)
	}
	for _, tc := range []struct{ script, want string }{
		{`echo '[1, 2]'`, "want one JSON object of item id -> state"},
		{`echo '{"a": 1} {"b": 2}'`, "want one JSON object"},
		{`echo null`, "want one JSON object"},
		{`echo oops >&2; exit 3`, "exit status 3: oops"},
		{`head -c 17000000 /dev/zero | tr '\0' ' '`, "more than 16777216 bytes on stdout"},
		{`sleep 30`, "timed out after"},
	} {
		x.list = []*suite.External{{Name: "inv", Pos: "suite.hcl:3", Reset: []string{"true"}, Snapshot: []string{"sh", "-c", tc.script}, Timeout: time.Second}}
		if _, err := x.after(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "external service inv (suite.hcl:3): snapshot") {
			t.Errorf("%s: %v, want %q", tc.script, err, tc.want)
		}
	}
}
