package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/suite"
	"github.com/airlock-sandbox/airlock/bench/world"
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
		// Only the case that must time out gets a short timeout: 17 MB
		// through tr took more than 1 s under make test's load.
		timeout := 30 * time.Second
		if strings.HasPrefix(tc.script, "sleep") {
			timeout = time.Second
		}
		x.list = []*suite.External{{Name: "inv", Pos: "suite.hcl:3", Reset: []string{"true"}, Snapshot: []string{"sh", "-c", tc.script}, Timeout: timeout}}
		if _, err := x.after(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "external service inv (suite.hcl:3): snapshot") {
			t.Errorf("%s: %v, want %q", tc.script, err, tc.want)
		}
	}
}

// A suite whose compared manifest reaches the paste site runs one action
// at a time, as one whose own manifests do: the paste site's requests go
// to one world instance.
func TestSuiteOneWorkerUnderCompare(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"suite.hcl":   "suite \"desk\" {\n  manifest = \"m.hcl\"\n}\nworld {\n  job \"job-a\" {}\n}\nprompt \"P-1\" {\n  text = \"x\"\n  authorized = []\n  actions = [\"true\"]\n}\n",
		"m.hcl":       "session \"m\" {\n  image = \"debian\"\n  workspace \".\" {\n    target = \"/w\"\n  }\n}\n",
		"paste.hcl.m": "session \"m\" {\n  image = \"debian\"\n  egress {\n    allow = [\"" + world.DefaultAudiences.Paste + ":443\"]\n  }\n  workspace \".\" {\n    target = \"/w\"\n  }\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := suite.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if suiteOneWorker(s, "") {
		t.Errorf("the suite's own manifest reaches no shared service")
	}
	if !suiteOneWorker(s, filepath.Join(dir, "paste.hcl.m")) {
		t.Errorf("a compared manifest reaching the paste site: not one worker")
	}
}
