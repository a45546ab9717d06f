package perf

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestFirstModelRequestFromServer drives a real model server with the
// calls an agent makes before its main loop (a probe, a side call) and
// then two main-loop requests: the first of those is the one timed, and
// the calls before it are counted.
func TestFirstModelRequestFromServer(t *testing.T) {
	srv, err := modelsrv.New(modelsrv.Script{Final: agentFinal})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	const key = "sk-perf-key"
	send := func(method, body string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+"/v1/messages", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if method == http.MethodHead {
			req.URL.Path = "/api/hello"
		}
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	start := time.Now()
	send(http.MethodHead, "")
	send(http.MethodPost, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"title this"}]}`)
	time.Sleep(20 * time.Millisecond)
	main := `{"model":"m","max_tokens":10,"tools":[{"name":"` + modelsrv.ClaudeBash + `","input_schema":{}}],"messages":[{"role":"user","content":"go"}]}`
	send(http.MethodPost, main)
	send(http.MethodPost, main)

	calls := srv.Calls()
	if kinds := []string{calls[0].Kind, calls[1].Kind, calls[2].Kind}; !slices.Equal(kinds, []string{modelsrv.KindProbe, modelsrv.KindSide, modelsrv.KindMain}) {
		t.Fatalf("call kinds %v", kinds)
	}
	d, before, err := firstModelRequest(calls, start, key)
	if err != nil {
		t.Fatal(err)
	}
	if before != 2 {
		t.Errorf("%d calls before the first main request, want 2", before)
	}
	if want := calls[2].Time.Sub(start); d != want || d < 20*time.Millisecond {
		t.Errorf("time to the first main request %v, want %v (after the 20ms pause)", d, want)
	}
}

func TestFirstModelRequestRefuses(t *testing.T) {
	start := time.Now()
	hdr := func(k string) http.Header { return http.Header{"X-Api-Key": {k}} }
	const key = "sk-perf-0123456789abcdef"
	for _, tc := range []struct {
		name  string
		calls []modelsrv.Call
		want  string
	}{
		{"no calls", nil, "received no request"},
		{"no main call", []modelsrv.Call{{Kind: modelsrv.KindProbe, Method: "HEAD", Path: "/api/hello", Time: start.Add(time.Second)}}, "no main request among the model server's 1: probe HEAD /api/hello"},
		{"before the start", []modelsrv.Call{{Kind: modelsrv.KindMain, Header: hdr(key), Time: start.Add(-time.Millisecond)}}, "before the run started"},
		{"placeholder, not the key", []modelsrv.Call{{Kind: modelsrv.KindMain, Header: hdr("airlock-secret-0123456789"), Time: start.Add(time.Second)}}, "carried the key \"airlock-secr…\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := firstModelRequest(tc.calls, start, key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A main call with the key as a bearer token counts (Codex).
	d, n, err := firstModelRequest([]modelsrv.Call{
		{Kind: modelsrv.KindModels, Time: start.Add(time.Millisecond)},
		{Kind: modelsrv.KindMain, Header: http.Header{"Authorization": {"Bearer " + key}}, Time: start.Add(1500 * time.Millisecond)},
	}, start, key)
	if err != nil || d != 1500*time.Millisecond || n != 1 {
		t.Errorf("bearer main call: %v %d %v, want 1.5s 1 nil", d, n, err)
	}
}

func TestAgentRowSummary(t *testing.T) {
	// runs with the session's start a quarter in when launch.
	runs := func(launch bool, xs ...int) []agentRun {
		var out []agentRun
		for _, x := range xs {
			d := time.Duration(x) * time.Millisecond
			r := agentRun{first: d, exit: 2 * d, before: 1}
			if launch {
				r.launched = d / 4
			}
			out = append(out, r)
		}
		return out
	}
	row := AgentRow{
		Agent: "claude-code", Example: "examples/claude-code.hcl", Image: "airlock/claude-code:bookworm",
		// A run whose session start was not read counts in the total
		// alone.
		Airlock: side("airlock run --rm -f x.hcl", append(runs(true, 3000, 1000, 2000), agentRun{first: 10 * time.Second, exit: 11 * time.Second}), []string{"a", "b", "c", "d"}),
		Bare:    side("env -i claude", runs(false, 500, 400, 600), nil),
	}
	row.Airlock.WarmupMS, row.Bare.WarmupMS = 9000, -1
	row.compare()
	if a := row.Airlock; a.FirstRequestMS.N != 4 || a.FirstRequestMS.Median != 2500 || a.ExitMS.Median != 5000 || a.Failures != 4 || len(a.Errors) != 3 {
		t.Errorf("airlock side %+v", a)
	}
	if a := row.Airlock; a.LaunchMS.N != 3 || a.LaunchMS.Median != 500 || a.InSandboxMS.N != 3 || a.InSandboxMS.Median != 1500 {
		t.Errorf("airlock split: launch %+v in sandbox %+v, want 3 runs each, medians 500 and 1500", a.LaunchMS, a.InSandboxMS)
	}
	if row.Ratio != 5 || row.AddedMS != 2000 {
		t.Errorf("ratio %v added %v, want 5 and 2000", row.Ratio, row.AddedMS)
	}
	r := &Report{AgentStart: &AgentStart{Runs: 3, Reproduce: "hack/perf.sh -only agentstart -agent-runs 3 -agents claude-code", Agents: []AgentRow{row}}}
	md := r.Markdown()
	for _, want := range []string{
		"| claude-code: `airlock run` of examples/claude-code.hcl to the agent's first model request (ms) | 2500 (1300–7900) | bare on the host: 500 (420–580) | ×5.00 (+2000 ms) |",
		"| claude-code | airlock run --rm examples/claude-code.hcl | 2500 (1300–7900) | 7900 | 500 / 1500 | 9000 | 5000 (2600–9500) | 1 | 4 |",
		"| claude-code | bare | 500 (420–580) | 580 | – | – | 1000 (840–1160) | 1 | 0 |",
		"airlock ×5.00 of bare, +2000 ms",
		"Reproduce: `hack/perf.sh -only agentstart -agent-runs 3 -agents claude-code`",
		"Agent start, claude-code: `airlock run` of examples/claude-code.hcl reaches the agent's first model request in 2500 ms (median of 4), ×5.00 of the same binary started bare against the same model server (500 ms, +2000 ms). Of it, 500 ms run to the session's start",
		"and 1500 ms are the agent's own start in the sandbox",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}

	// A side without a successful run: no ratio, no summary row.
	row.Bare = side("env -i claude", nil, []string{"exit status 1: boom"})
	row.compare()
	if row.Ratio != 0 || row.AddedMS != 0 {
		t.Errorf("ratio %v added %v without bare runs, want 0", row.Ratio, row.AddedMS)
	}
	r.AgentStart.Agents = []AgentRow{row}
	md = r.Markdown()
	if strings.Contains(md, "to the agent's first model request (ms) |") || strings.Contains(md, "Agent start, claude-code") || !strings.Contains(md, "no ratio") || !strings.Contains(md, "A failed bare run: exit status 1: boom") {
		t.Errorf("report without bare runs:\n%s", md)
	}
	if row.Bare.FirstRequestMS != (stats.Summary{}) {
		t.Errorf("bare summary %+v, want empty", row.Bare.FirstRequestMS)
	}
}

func TestBareEnv(t *testing.T) {
	p := &policies.Policy{
		Env:     map[string]string{"HOME": "/tmp", "ANTHROPIC_BASE_URL": "https://api.x.test"},
		Secrets: []policies.Secret{{Name: "ANTHROPIC_API_KEY"}, {Name: "OTHER", EnvVar: "OTHER_VAR"}},
	}
	got := bareEnv(p, "sk-1", "/ca.pem")
	want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "ANTHROPIC_BASE_URL=https://api.x.test", "HOME=/tmp",
		"ANTHROPIC_API_KEY=sk-1", "OTHER_VAR=sk-1", "SSL_CERT_FILE=/ca.pem", "NODE_EXTRA_CA_CERTS=/ca.pem"}
	if !slices.Equal(got, want) {
		t.Errorf("bareEnv\n got %q\nwant %q", got, want)
	}
	if shown := strings.Join(redactEnv(got, "sk-1", 1000, 1001), " "); strings.Contains(shown, "sk-1") || !strings.Contains(shown, "ANTHROPIC_API_KEY=$KEY") || !strings.HasSuffix(shown, "AGENT_UID=1000 AGENT_GID=1001") {
		t.Errorf("redactEnv: %s", shown)
	}
	for in, want := range map[string][2]int{"1000:1000": {1000, 1000}, "1000": {1000, 1000}, "": {65534, 65534}, "5:7": {5, 7}} {
		uid, gid, err := parseUser(in)
		if err != nil || uid != want[0] || gid != want[1] {
			t.Errorf("parseUser(%q) = %d %d %v", in, uid, gid, err)
		}
	}
	if _, _, err := parseUser("agent"); err == nil {
		t.Error("parseUser(agent): no error")
	}
}

// TestAdmissionPolicy: the harness's airlockd admits what the built-in
// policy admits, but takes secrets from its own directory.
func TestAdmissionPolicy(t *testing.T) {
	src, err := admissionPolicy("/tmp/alperf-x/secrets")
	if err != nil {
		t.Fatal(err)
	}
	a, diags := policies.DecodeAdmission("admission.hcl", []byte(src))
	if diags != nil {
		t.Fatal(diags)
	}
	def := policies.DefaultAdmission()
	if got, want := a.SecretSources, []policies.SecretSource{{From: "file:/tmp/alperf-x/secrets/*/*", Hosts: []string{policies.DirHost}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("secret sources %+v, want %+v", got, want)
	}
	a.SecretSources, def.SecretSources = nil, nil
	a.Source, def.Source = "", ""
	if !reflect.DeepEqual(a, def) {
		t.Errorf("admission\n got %+v\nwant %+v (the built-in policy)", a, def)
	}
}
