package modelsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Codex's tools, as its requests name them.
const (
	CodexExec       = "exec_command"
	CodexApplyPatch = "apply_patch"
)

type responsesRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Input  []json.RawMessage `json:"input"`
	Tools  []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

type responsesItem struct {
	Type   string          `json:"type"`
	CallID string          `json:"call_id"`
	Output json.RawMessage `json:"output"`
}

// outputText flattens a function call output: a string, an object with
// "content", or a list of content items with "text".
func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != "" {
		return obj.Content
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
		}
		return sb.String()
	}
	return string(raw)
}

func (s *Server) serveResponses(ctx context.Context, w http.ResponseWriter, c *Call) {
	var req responsesRequest
	if err := json.Unmarshal(c.Body, &req); err != nil {
		c.Err = "request body: " + err.Error()
		apiError(w, OpenAI, http.StatusBadRequest, c.Err)
		return
	}
	c.Model, c.Stream = req.Model, req.Stream
	c.ToolResults = map[string]ToolResult{}
	for _, raw := range req.Input {
		var it responsesItem
		if json.Unmarshal(raw, &it) != nil || !strings.HasSuffix(it.Type, "_call_output") {
			continue
		}
		if st, i, ok := parseCallID(it.CallID); ok {
			c.ToolResults[it.CallID] = ToolResult{Step: st, Index: i, Output: outputText(it.Output)}
		}
	}
	if isGuardian(c.Body) {
		c.Kind = KindClassifier
		c.Verdict = s.verdict(plannedAction(c.Body))
	}
	main, patchType := false, ""
	for _, t := range req.Tools {
		switch t.Name {
		case CodexExec, "shell":
			main = true
		case CodexApplyPatch:
			patchType = t.Type
		}
	}
	seq := s.nextID()
	var items []map[string]any
	msg := func(text string) map[string]any {
		return map[string]any{"type": "message", "id": fmt.Sprintf("msg_airlock_%d_%d", seq, len(items)),
			"role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
	}
	switch {
	case c.Kind == KindClassifier:
		items = append(items, msg(guardianAnswer(c.Verdict)))
	case !main:
		c.Kind = KindSide
		items = append(items, msg(s.sideText()))
	default:
		c.Kind = KindMain
		c.Step = s.pace(ctx, s.stepFor(c.ToolResults), c.ToolResults)
		if c.Step == len(s.script.Steps) {
			items = append(items, msg(s.script.Final))
		} else {
			st := s.script.Steps[c.Step]
			if st.Text != "" {
				items = append(items, msg(st.Text))
			}
			for i, a := range st.Calls {
				items = append(items, codexTool(a, callID("call", c.Step, i), fmt.Sprintf("fc_airlock_%d_%d", seq, i), patchType))
			}
		}
	}
	id := fmt.Sprintf("resp_airlock_%d", seq)
	in := approxTokens(c.Body)
	usage := map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10 * len(items), "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": in + 10*len(items)}
	resp := func(status string, output []map[string]any, usage any) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": time.Now().Unix(), "status": status,
			"model": req.Model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil}
	}
	if !req.Stream {
		writeJSON(w, resp("completed", items, usage))
		return
	}
	ev := startSSE(w)
	n := 0
	send := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = n
		n++
		ev.event(typ, fields)
	}
	send("response.created", map[string]any{"response": resp("in_progress", []map[string]any{}, nil)})
	send("response.in_progress", map[string]any{"response": resp("in_progress", []map[string]any{}, nil)})
	for i, it := range items {
		started := map[string]any{}
		for k, v := range it {
			started[k] = v
		}
		started["status"] = "in_progress"
		switch it["type"] {
		case "message":
			started["content"] = []any{}
			send("response.output_item.added", map[string]any{"output_index": i, "item": started})
			text := it["content"].([]any)[0].(map[string]any)["text"].(string)
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			send("response.content_part.added", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0, "part": part})
			for _, d := range halves(text) {
				send("response.output_text.delta", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0, "delta": d})
			}
			send("response.output_text.done", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0, "text": text})
			send("response.content_part.done", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		case "function_call":
			started["arguments"] = ""
			send("response.output_item.added", map[string]any{"output_index": i, "item": started})
			args := it["arguments"].(string)
			for _, d := range halves(args) {
				send("response.function_call_arguments.delta", map[string]any{"output_index": i, "item_id": it["id"], "delta": d})
			}
			send("response.function_call_arguments.done", map[string]any{"output_index": i, "item_id": it["id"], "arguments": args})
		case "custom_tool_call":
			started["input"] = ""
			send("response.output_item.added", map[string]any{"output_index": i, "item": started})
			input := it["input"].(string)
			for _, d := range halves(input) {
				send("response.custom_tool_call_input.delta", map[string]any{"output_index": i, "item_id": it["id"], "delta": d})
			}
			send("response.custom_tool_call_input.done", map[string]any{"output_index": i, "item_id": it["id"], "input": input})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	send("response.completed", map[string]any{"response": resp("completed", items, usage)})
}

// codexTool is a's tool call for Codex: exec_command for shell commands and
// reads, apply_patch (a custom tool taking the patch as its input, or a
// function taking it as "input", whichever the request offers) for writes
// and edits.
func codexTool(a Action, callID, itemID, patchType string) map[string]any {
	var name string
	var args any
	switch a.Kind {
	case Shell:
		m := map[string]any{"cmd": a.Command}
		if a.Escalate {
			m["sandbox_permissions"] = "require_escalated"
			m["justification"] = "The model script runs this outside the sandbox."
		}
		name, args = CodexExec, m
	case Read:
		name, args = CodexExec, map[string]any{"cmd": "cat " + shellQuote(a.Path)}
	case Write, Edit:
		patch := patchFor(a)
		if patchType == "custom" {
			return map[string]any{"type": "custom_tool_call", "id": itemID, "call_id": callID,
				"name": CodexApplyPatch, "input": patch, "status": "completed"}
		}
		name, args = CodexApplyPatch, map[string]any{"input": patch}
	case Tool:
		in := string(a.Input)
		if in == "" {
			in = "{}"
		}
		return map[string]any{"type": "function_call", "id": itemID, "call_id": callID,
			"name": a.Name, "arguments": in, "status": "completed"}
	}
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return map[string]any{"type": "function_call", "id": itemID, "call_id": callID,
		"name": name, "arguments": string(b), "status": "completed"}
}

// patchFor is a's edit in apply_patch's format. Write adds the file
// (apply_patch refuses to add one that exists; use Edit, or a shell
// command, to replace it).
func patchFor(a Action) string {
	var sb strings.Builder
	sb.WriteString("*** Begin Patch\n")
	switch a.Kind {
	case Write:
		fmt.Fprintf(&sb, "*** Add File: %s\n", a.Path)
		for _, l := range lines(a.Content) {
			sb.WriteString("+" + l + "\n")
		}
	case Edit:
		fmt.Fprintf(&sb, "*** Update File: %s\n@@\n", a.Path)
		for _, l := range lines(a.Old) {
			sb.WriteString("-" + l + "\n")
		}
		for _, l := range lines(a.New) {
			sb.WriteString("+" + l + "\n")
		}
	}
	sb.WriteString("*** End Patch\n")
	return sb.String()
}

// lines splits s into lines without their newlines; a trailing newline
// does not make an empty last line.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
