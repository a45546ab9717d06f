package modelsrv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func testScript() Script {
	return Script{
		Steps: []Step{
			{Text: "first", Calls: []Action{RunShell("echo <a> & 'b'"), WriteFile("/w/f.txt", "x\ny\n")}},
			{Calls: []Action{EditFile("/w/f.txt", "y", "z"), ReadFile("/w/f.txt")}},
		},
		Final: "the end",
		Side:  "a title</stop>ignored",
	}
}

func newServer(t *testing.T, s Script) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs
}

func post(t *testing.T, url string, hdr map[string]string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decode(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

type event struct {
	name string
	data map[string]any
}

// events reads a server-sent event stream, checking that each event's
// name is its data's type.
func events(t *testing.T, resp *http.Response) []event {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var evs []event
	var name string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(line[len("data: "):]), &m); err != nil {
				t.Fatalf("event %s: %v", name, err)
			}
			if m["type"] != name {
				t.Errorf("event %s carries type %v", name, m["type"])
			}
			evs = append(evs, event{name, m})
		}
	}
	return evs
}

var claudeTools = []map[string]any{{"name": "Bash"}, {"name": "Write"}, {"name": "Edit"}, {"name": "Read"}}

func TestMessagesPlain(t *testing.T) {
	srv, hs := newServer(t, testScript())
	req := map[string]any{"model": "m", "tools": claudeTools,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}}
	m := decode(t, post(t, hs.URL+"/v1/messages", map[string]string{"x-api-key": "k1"}, req))
	if m["stop_reason"] != "tool_use" {
		t.Errorf("stop_reason %v", m["stop_reason"])
	}
	content := m["content"].([]any)
	if len(content) != 3 || content[0].(map[string]any)["text"] != "first" {
		t.Fatalf("content %v", content)
	}
	bash := content[1].(map[string]any)
	if bash["name"] != "Bash" || bash["input"].(map[string]any)["command"] != "echo <a> & 'b'" || bash["id"] != "toolu_airlock_0_0" {
		t.Errorf("first call %v", bash)
	}
	write := content[2].(map[string]any)
	if in := write["input"].(map[string]any); write["name"] != "Write" || in["file_path"] != "/w/f.txt" || in["content"] != "x\ny\n" {
		t.Errorf("second call %v", write)
	}

	// The results of step 0 (one of them an error) make the next call step 1.
	req["messages"] = []any{
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "content": content},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_airlock_0_0", "content": "out0"},
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_airlock_0_1", "is_error": true,
				"content": []any{map[string]any{"type": "text", "text": "denied"}}},
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_someone_else", "content": "x"},
		}},
	}
	m = decode(t, post(t, hs.URL+"/v1/messages?beta=true", nil, req))
	content = m["content"].([]any)
	if len(content) != 2 || content[0].(map[string]any)["name"] != "Edit" || content[1].(map[string]any)["name"] != "Read" {
		t.Fatalf("step 1 content %v", content)
	}
	if in := content[0].(map[string]any)["input"].(map[string]any); in["old_string"] != "y" || in["new_string"] != "z" {
		t.Errorf("edit %v", in)
	}
	calls := srv.Calls()
	if got := calls[1].ToolResults; len(got) != 2 || got["toolu_airlock_0_0"].Output != "out0" ||
		!got["toolu_airlock_0_1"].IsError || got["toolu_airlock_0_1"].Output != "denied" {
		t.Errorf("tool results %+v", got)
	}

	// After the last step, the final message, whatever comes later.
	req["messages"] = append(req["messages"].([]any),
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_airlock_1_1", "content": "x"}}})
	for range 2 {
		m = decode(t, post(t, hs.URL+"/v1/messages", nil, req))
		if m["stop_reason"] != "end_turn" || m["content"].([]any)[0].(map[string]any)["text"] != "the end" {
			t.Errorf("final %v", m)
		}
	}
	if got := srv.MainSteps(); !slices.Equal(got, []int{0, 1, 2, 2}) {
		t.Errorf("steps %v", got)
	}
	if got := srv.APIKeys(); !slices.Equal(got, []string{"k1"}) {
		t.Errorf("keys %v", got)
	}
}

func TestMessagesStream(t *testing.T) {
	_, hs := newServer(t, testScript())
	req := map[string]any{"model": "m", "stream": true, "tools": claudeTools,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}}
	evs := events(t, post(t, hs.URL+"/v1/messages", nil, req))
	var names []string
	inputs := map[int]string{}
	texts := map[int]string{}
	for _, e := range evs {
		names = append(names, e.name)
		if e.name != "content_block_delta" {
			continue
		}
		i := int(e.data["index"].(float64))
		d := e.data["delta"].(map[string]any)
		switch d["type"] {
		case "input_json_delta":
			inputs[i] += d["partial_json"].(string)
		case "text_delta":
			texts[i] += d["text"].(string)
		}
	}
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" {
		t.Errorf("events %v", names)
	}
	if d := evs[len(evs)-2].data["delta"].(map[string]any); d["stop_reason"] != "tool_use" {
		t.Errorf("message_delta %v", d)
	}
	if texts[0] != "first" {
		t.Errorf("text %q", texts[0])
	}
	var in map[string]string
	if err := json.Unmarshal([]byte(inputs[1]), &in); err != nil || in["command"] != "echo <a> & 'b'" {
		t.Errorf("bash input %q: %v", inputs[1], err)
	}
	if err := json.Unmarshal([]byte(inputs[2]), &in); err != nil || in["file_path"] != "/w/f.txt" {
		t.Errorf("write input %q: %v", inputs[2], err)
	}
}

// A call without the shell tool is a side call: answered with Script.Side,
// cut at the request's stop sequence.
func TestMessagesSide(t *testing.T) {
	srv, hs := newServer(t, testScript())
	req := map[string]any{"model": "haiku", "system": "Generate a title", "stop_sequences": []string{"</stop>"},
		"messages": []any{map[string]any{"role": "user", "content": "go"}}}
	m := decode(t, post(t, hs.URL+"/v1/messages", nil, req))
	if m["stop_reason"] != "stop_sequence" || m["stop_sequence"] != "</stop>" || m["content"].([]any)[0].(map[string]any)["text"] != "a title" {
		t.Errorf("side answer %v", m)
	}
	if c := srv.Calls()[0]; c.Kind != KindSide || c.Step != -1 || c.Model != "haiku" {
		t.Errorf("call %+v", c)
	}
}

func TestMessagesClassifier(t *testing.T) {
	s := testScript()
	s.Steps[0].Calls[0].Gate = Block
	srv, hs := newServer(t, s)
	ask := func(entry string, stage2 bool) map[string]any {
		tail := "Your ENTIRE response MUST begin with <block>."
		var stops []string
		if stage2 {
			tail = "Use <thinking> before responding with <block>."
		} else {
			stops = []string{"</block>"}
		}
		req := map[string]any{"model": "m", "max_tokens": 64, "stop_sequences": stops,
			"system": []any{map[string]any{"type": "text", "text": "You are a security monitor. If the action should be allowed:\n<block>no</block>"}},
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "<transcript>\n"},
				map[string]any{"type": "text", "text": `{"user":"go"}` + "\n" + entry + "\n"},
				map[string]any{"type": "text", "text": "</transcript>\n"},
				map[string]any{"type": "text", "text": tail},
			}}}}
		return decode(t, post(t, hs.URL+"/v1/messages", nil, req))
	}
	text := func(m map[string]any) string { return m["content"].([]any)[0].(map[string]any)["text"].(string) }
	if got := text(ask(`{"Bash":"echo <a> & 'b'"}`, false)); got != "<block>yes" {
		t.Errorf("blocked action, stage 1: %q", got)
	}
	if got := text(ask(`{"Bash":"echo <a> & 'b'"}`, true)); !strings.Contains(got, "<block>yes</block>") || !strings.HasPrefix(got, "<thinking>") {
		t.Errorf("blocked action, stage 2: %q", got)
	}
	if got := text(ask(`{"Write":{"file_path":"/w/f.txt","content":"x"}}`, false)); got != "<block>no" {
		t.Errorf("allowed action: %q", got)
	}
	if got := text(ask(`{"Bash":"unscripted"}`, false)); got != "<block>no" {
		t.Errorf("unscripted action: %q", got)
	}
	var verdicts []string
	for _, c := range srv.Calls() {
		if c.Kind != KindClassifier {
			t.Errorf("call kind %s", c.Kind)
		}
		verdicts = append(verdicts, c.Verdict)
	}
	if !slices.Equal(verdicts, []string{Block, Block, Allow, Allow}) {
		t.Errorf("verdicts %v", verdicts)
	}
}

var codexTools = []map[string]any{{"type": "function", "name": "exec_command"}, {"type": "function", "name": "write_stdin"},
	{"type": "custom", "name": "apply_patch"}}

func TestResponsesStream(t *testing.T) {
	srv, hs := newServer(t, testScript())
	req := map[string]any{"model": "gpt", "stream": true, "tools": codexTools,
		"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "go"}}}}}
	evs := events(t, post(t, hs.URL+"/v1/responses", map[string]string{"Authorization": "Bearer k2"}, req))
	if evs[0].name != "response.created" || evs[len(evs)-1].name != "response.completed" {
		t.Errorf("first and last events %s, %s", evs[0].name, evs[len(evs)-1].name)
	}
	var done []map[string]any
	for i, e := range evs {
		if int(e.data["sequence_number"].(float64)) != i {
			t.Errorf("event %d has sequence number %v", i, e.data["sequence_number"])
		}
		if e.name == "response.output_item.done" {
			done = append(done, e.data["item"].(map[string]any))
		}
	}
	out := evs[len(evs)-1].data["response"].(map[string]any)["output"].([]any)
	if len(done) != 3 || len(out) != 3 {
		t.Fatalf("items done %v, output %v", done, out)
	}
	if done[0]["type"] != "message" {
		t.Errorf("item 0 %v", done[0])
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(done[1]["arguments"].(string)), &args); err != nil || done[1]["name"] != "exec_command" ||
		args["cmd"] != "echo <a> & 'b'" || done[1]["call_id"] != "call_airlock_0_0" {
		t.Errorf("item 1 %v (%v)", done[1], err)
	}
	if want := "*** Begin Patch\n*** Add File: /w/f.txt\n+x\n+y\n*** End Patch\n"; done[2]["type"] != "custom_tool_call" || done[2]["input"] != want {
		t.Errorf("item 2 %v", done[2])
	}

	// Step 1 after the results of step 0; the edit is an Update File patch.
	req["stream"] = false
	req["input"] = append(req["input"].([]any),
		map[string]any{"type": "function_call_output", "call_id": "call_airlock_0_0", "output": "ran"},
		map[string]any{"type": "custom_tool_call_output", "call_id": "call_airlock_0_1", "output": "Success"})
	m := decode(t, post(t, hs.URL+"/v1/responses", nil, req))
	items := m["output"].([]any)
	if m["status"] != "completed" || len(items) != 2 {
		t.Fatalf("step 1 %v", m)
	}
	if want := "*** Begin Patch\n*** Update File: /w/f.txt\n@@\n-y\n+z\n*** End Patch\n"; items[0].(map[string]any)["input"] != want {
		t.Errorf("edit %v", items[0])
	}
	if err := json.Unmarshal([]byte(items[1].(map[string]any)["arguments"].(string)), &args); err != nil || args["cmd"] != "cat '/w/f.txt'" {
		t.Errorf("read %v", items[1])
	}
	if got := srv.Calls()[1].ToolResults; got["call_airlock_0_0"].Output != "ran" || got["call_airlock_0_1"].Output != "Success" {
		t.Errorf("tool results %+v", got)
	}
	if got := srv.APIKeys(); !slices.Equal(got, []string{"k2"}) {
		t.Errorf("keys %v", got)
	}
}

// Bad requests are answered with an error in the API's shape, and recorded.
func TestBadRequests(t *testing.T) {
	srv, hs := newServer(t, testScript())
	for _, tc := range []struct {
		method, path, body string
		status             int
		kind               string
	}{
		{"POST", "/v1/messages", "{not json", 400, KindOther},
		{"POST", "/v1/responses", `{"input": 3}`, 400, KindOther},
		{"GET", "/v1/nothing", "", 404, KindOther},
		{"HEAD", "/api/hello", "", 200, KindProbe},
		{"GET", "/v1/models", "", 200, KindModels},
		{"POST", "/v1/messages/count_tokens", `{"messages":[]}`, 200, KindCountTokens},
		{"POST", "/v1/messages", strings.Repeat("x", maxBody+1), 413, KindOther},
	} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.status, b)
		}
		if tc.status >= 400 && !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s %s: error body %s", tc.method, tc.path, b)
		}
		calls := srv.Calls()
		if c := calls[len(calls)-1]; c.Kind != tc.kind || c.Status != tc.status || c.Path != tc.path {
			t.Errorf("%s %s recorded as %s %d %s", tc.method, tc.path, c.Kind, c.Status, c.Path)
		}
	}
}

func TestDecodeScript(t *testing.T) {
	want := testScript()
	want.Gate = Block
	want.Steps[1].Calls = append(want.Steps[1].Calls, Action{Kind: Tool, Name: "Glob", Input: json.RawMessage(`{"pattern":"*"}`), Gate: Allow})
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeScript(b)
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	if string(gb) != string(b) {
		t.Errorf("round trip:\n%s\nwant\n%s", gb, b)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"steps":[{"calls":[{"kind":"shell"}]}]}`, "step 0 call 0: shell: command is required"},
		{`{"steps":[{"calls":[]}]}`, "step 0: no calls"},
		{`{"steps":[{"calls":[{"kind":"rm","command":"x"}]}]}`, `unknown kind "rm"`},
		{`{"steps":[{"calls":[{"command":"x"}]}]}`, "kind is required"},
		{`{"steps":[{"calls":[{"kind":"edit","path":"/f"}]}]}`, "edit: old is required"},
		{`{"steps":[{"calls":[{"kind":"tool","name":"X","input":[1]}]}]}`, "input is not a JSON object"},
		{`{"steps":[{"calls":[{"kind":"shell","command":"x","gate":"maybe"}]}]}`, `gate "maybe"`},
		{`{"gate":"deny"}`, `gate "deny"`},
		{`{"steps":[{"calls":[{"kind":"read","path":"/f","escalate":true}]}]}`, "only a shell command escalates"},
		{`{"stpes":[]}`, `unknown field "stpes"`},
		{`{"final":"a"} {}`, "trailing data"},
	} {
		_, err := DecodeScript([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid-argument error with %q", tc.in, err, tc.want)
		}
	}
	if _, err := New(Script{Steps: []Step{{}}}); err == nil {
		t.Error("New took a step without calls")
	}
}

func TestCallID(t *testing.T) {
	for _, st := range []int{0, 7, 123} {
		id := callID("toolu", st, 2)
		if s, i, ok := parseCallID(id); !ok || s != st || i != 2 {
			t.Errorf("%s: %d %d %v", id, s, i, ok)
		}
	}
	for _, id := range []string{"toolu_01abc", "call_airlock_x_1", "call_airlock_1", "call_airlock_-1_0", ""} {
		if _, _, ok := parseCallID(id); ok {
			t.Errorf("%q parsed as a script call id", id)
		}
	}
}

// Codex's guardian: a Responses call asking for the outcome schema about a
// planned action; answered with the action's gate verdict as JSON.
func TestResponsesGuardian(t *testing.T) {
	s := testScript()
	s.Steps[0].Calls[0].Gate = Block
	s.Steps[1].Calls = append(s.Steps[1].Calls, Action{Kind: Shell, Command: "echo <a> & 'b' 2", Gate: Allow})
	srv, hs := newServer(t, s)
	ask := func(command string) map[string]any {
		planned, _ := json.Marshal(map[string]any{"command": []string{"/bin/bash", "-lc", command}, "tool": "exec_command"})
		req := map[string]any{"model": "gpt", "tools": codexTools,
			"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "codex_output_schema",
				"schema": map[string]any{"properties": map[string]any{"outcome": map[string]any{"type": "string"}}}}},
			"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": ">>> TRANSCRIPT START\n[1] user: echo <a> & 'b'\n>>> TRANSCRIPT END\n"},
				map[string]any{"type": "input_text", "text": "Planned action JSON:\n"},
				map[string]any{"type": "input_text", "text": string(planned) + "\n"},
				map[string]any{"type": "input_text", "text": ">>> APPROVAL REQUEST END\n"},
			}}}}
		m := decode(t, post(t, hs.URL+"/v1/responses", nil, req))
		text := m["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
		var a map[string]any
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			t.Fatalf("guardian answer %q: %v", text, err)
		}
		return a
	}
	if a := ask("echo <a> & 'b'"); a["outcome"] != "deny" {
		t.Errorf("blocked command: %v", a)
	}
	// An unscripted command holding the blocked one takes its verdict.
	if a := ask("echo <a> & 'b' && echo more"); a["outcome"] != "deny" {
		t.Errorf("a command holding the blocked one: %v", a)
	}
	if a := ask("echo <a> & 'b' 2"); a["outcome"] != "allow" {
		t.Errorf("the allowed command the blocked one is a prefix of: %v", a)
	}
	// The transcript names the blocked command too; only the planned
	// action counts.
	if a := ask("ls"); a["outcome"] != "allow" {
		t.Errorf("unscripted command: %v", a)
	}
	for _, c := range srv.Calls() {
		if c.Kind != KindClassifier || c.Step != -1 {
			t.Errorf("call %s step %d", c.Kind, c.Step)
		}
	}
}

// A pacer sees each main call's step and the results it carries before the
// call is answered, and can end the conversation early.
func TestPacer(t *testing.T) {
	type seen struct {
		step    int
		results int
	}
	var got []seen
	srv, err := WithPacer(testScript(), func(_ context.Context, step int, results map[string]ToolResult) bool {
		got = append(got, seen{step, len(results)})
		return step == 0 // ends the conversation at step 1
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	req := map[string]any{"model": "m", "tools": claudeTools,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}}
	m := decode(t, post(t, hs.URL+"/v1/messages", nil, req))
	content := m["content"].([]any)
	if m["stop_reason"] != "tool_use" {
		t.Fatalf("step 0 answered %v", m)
	}
	req["messages"] = []any{
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "content": content},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_airlock_0_0", "content": "out0"},
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_airlock_0_1", "content": "ok"},
		}},
	}
	m = decode(t, post(t, hs.URL+"/v1/messages", nil, req))
	if m["stop_reason"] != "end_turn" || m["content"].([]any)[0].(map[string]any)["text"] != "the end" {
		t.Errorf("a paced end answered %v", m)
	}
	if want := []seen{{0, 0}, {1, 2}}; !slices.Equal(got, want) {
		t.Errorf("pacer saw %v, want %v", got, want)
	}
	if steps := srv.MainSteps(); !slices.Equal(steps, []int{0, 2}) {
		t.Errorf("steps recorded %v, want [0 2] (the final message's)", steps)
	}
	// The same for the Responses API.
	got = nil
	resp := decode(t, post(t, hs.URL+"/v1/responses", nil, map[string]any{"model": "m", "tools": codexTools, "input": []any{map[string]any{"role": "user", "content": "go"}}}))
	if out := resp["output"].([]any); len(out) < 2 || len(got) != 1 || got[0].step != 0 {
		t.Errorf("responses: output %v, pacer %v", out, got)
	}
}
