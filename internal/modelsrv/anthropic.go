package modelsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Claude Code's tools, as its requests name them.
const (
	ClaudeBash  = "Bash"
	ClaudeWrite = "Write"
	ClaudeEdit  = "Edit"
	ClaudeRead  = "Read"
)

type messagesRequest struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	StopSequences []string `json:"stop_sequences"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// blocks decodes a message's content: a string or a list of blocks.
func blocks(raw json.RawMessage) []anthropicBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(raw, &bs)
	return bs
}

// textOf flattens a tool result's content (a string or text blocks).
func textOf(raw json.RawMessage) string {
	var sb strings.Builder
	for _, b := range blocks(raw) {
		sb.WriteString(b.Text)
	}
	return sb.String()
}

func (s *Server) serveMessages(ctx context.Context, w http.ResponseWriter, c *Call) {
	var req messagesRequest
	if err := json.Unmarshal(c.Body, &req); err != nil {
		c.Err = "request body: " + err.Error()
		apiError(w, Anthropic, http.StatusBadRequest, c.Err)
		return
	}
	c.Model, c.Stream = req.Model, req.Stream
	c.ToolResults = map[string]ToolResult{}
	for _, m := range req.Messages {
		for _, b := range blocks(m.Content) {
			if b.Type != "tool_result" {
				continue
			}
			if st, i, ok := parseCallID(b.ToolUseID); ok {
				c.ToolResults[b.ToolUseID] = ToolResult{Step: st, Index: i, Output: textOf(b.Content), IsError: b.IsError}
			}
		}
	}
	main := false
	for _, t := range req.Tools {
		main = main || t.Name == ClaudeBash
	}
	var content []anthropicBlock
	stop, stopSeq := "end_turn", ""
	switch system := textOf(req.System); {
	case isClassifier(system):
		c.Kind = KindClassifier
		var prompt string
		if n := len(req.Messages); n > 0 {
			prompt = textOf(req.Messages[n-1].Content)
		}
		c.Verdict = s.verdict(lastAction(prompt))
		text, seq := applyStop(classifierAnswer(c.Verdict, prompt), req.StopSequences)
		content = []anthropicBlock{{Type: "text", Text: text}}
		if seq != "" {
			stop, stopSeq = "stop_sequence", seq
		}
	case !main:
		c.Kind = KindSide
		text, seq := applyStop(s.sideText(), req.StopSequences)
		content = []anthropicBlock{{Type: "text", Text: text}}
		if seq != "" {
			stop, stopSeq = "stop_sequence", seq
		}
	default:
		c.Kind = KindMain
		c.Step = s.pace(ctx, s.stepFor(c.ToolResults), c.ToolResults)
		if c.Step == len(s.script.Steps) {
			content = []anthropicBlock{{Type: "text", Text: s.script.Final}}
		} else {
			st := s.script.Steps[c.Step]
			if st.Text != "" {
				content = append(content, anthropicBlock{Type: "text", Text: st.Text})
			}
			for i, a := range st.Calls {
				name, input := claudeTool(a)
				content = append(content, anthropicBlock{Type: "tool_use", ID: callID("toolu", c.Step, i), Name: name, Input: input})
			}
			stop = "tool_use"
		}
	}
	id := fmt.Sprintf("msg_airlock_%d", s.nextID())
	usage := map[string]any{"input_tokens": approxTokens(c.Body), "output_tokens": 0,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	outTokens := 0
	for _, b := range content {
		outTokens += (len(b.Text)+len(b.Input))/4 + 1
	}
	if !req.Stream {
		usage["output_tokens"] = outTokens
		var out []map[string]any
		for _, b := range content {
			if b.Type == "text" {
				out = append(out, map[string]any{"type": "text", "text": b.Text})
			} else {
				out = append(out, map[string]any{"type": b.Type, "id": b.ID, "name": b.Name, "input": b.Input})
			}
		}
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": out, "stop_reason": stop, "stop_sequence": nilIfEmpty(stopSeq), "usage": usage,
		})
		return
	}
	ev := startSSE(w)
	usage["output_tokens"] = 1
	ev.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage,
	}})
	for i, b := range content {
		switch b.Type {
		case "text":
			ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, part := range halves(b.Text) {
				ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": part}})
			}
		case "tool_use":
			ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			for _, part := range halves(string(b.Input)) {
				ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		ev.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	ev.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nilIfEmpty(stopSeq)}, "usage": map[string]any{"output_tokens": outTokens}})
	ev.event("message_stop", map[string]any{"type": "message_stop"})
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// halves splits s in two (at a rune boundary) so that a stream has more
// than one delta per block, as a model's has; an empty s is one empty part.
func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	i := len(s) / 2
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	if i == 0 {
		return []string{s}
	}
	return []string{s[:i], s[i:]}
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// claudeTool is a's tool call for Claude Code.
func claudeTool(a Action) (string, json.RawMessage) {
	var name string
	var in any
	switch a.Kind {
	case Shell:
		m := map[string]any{"command": a.Command, "description": "Run a scripted command"}
		if a.Escalate {
			m["dangerouslyDisableSandbox"] = true
		}
		name, in = ClaudeBash, m
	case Write:
		name, in = ClaudeWrite, map[string]any{"file_path": a.Path, "content": a.Content}
	case Edit:
		name, in = ClaudeEdit, map[string]any{"file_path": a.Path, "old_string": a.Old, "new_string": a.New}
	case Read:
		name, in = ClaudeRead, map[string]any{"file_path": a.Path}
	case Tool:
		if len(a.Input) == 0 {
			return a.Name, json.RawMessage(`{}`)
		}
		return a.Name, a.Input
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	return name, b
}
