package modelsrv

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// KindClassifier is a call of the agent's permission classifier, answered
// with the script's Gate verdict for the action it judges:
//   - Claude Code's auto mode sends each action it does not allow by its
//     own rules to the model, with a system prompt asking for
//     "<block>yes</block>" or "<block>no</block>", first in a short stage
//     (stopped at "</block>") and, when that blocks, in a second stage that
//     thinks first;
//   - Codex's auto review (approvals_reviewer="auto_review") sends each
//     request to run outside its sandbox to a "guardian" subagent, whose
//     answer is JSON with an "outcome" of "allow" or "deny". The guardian
//     is offered exec_command too, for read-only checks; the server makes
//     none.
const KindClassifier = "classifier"

// classifierMarker is in the classifier's system prompt: the answer format.
const classifierMarker = "<block>no</block>"

// isClassifier reports whether a call's system prompt is the classifier's.
func isClassifier(system string) bool { return strings.Contains(system, classifierMarker) }

// lastAction is the last entry of the transcript the classifier judges:
// the action about to run, one JSON line such as {"Bash":"ls"}.
func lastAction(prompt string) string {
	if i := strings.LastIndex(prompt, "</transcript>"); i >= 0 {
		prompt = prompt[:i]
	}
	lines := strings.Split(strings.TrimSpace(prompt), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// verdict is the script's gate verdict on the action the classifier
// judges: that of the scripted action the entry names, else Script.Gate,
// else Allow. An action is named by its command (or its path) as a whole
// string of the entry read as JSON; failing that, as a part of the entry
// (JSON-escaped) or of one of its strings. The first action named wins.
func (s *Server) verdict(entry string) string {
	def := s.script.Gate
	if def == "" {
		def = Allow
	}
	values := jsonStrings(entry)
	exact := func(key string) bool { return slices.Contains(values, key) }
	part := func(key string) bool {
		if strings.Contains(entry, jsonEscape(key)) {
			return true
		}
		for _, v := range values {
			if strings.Contains(v, key) {
				return true
			}
		}
		return false
	}
	for _, names := range []func(string) bool{exact, part} {
		for _, st := range s.script.Steps {
			for _, a := range st.Calls {
				key := a.Command
				if a.Kind != Shell {
					key = a.Path
				}
				if key == "" || !names(key) {
					continue
				}
				if a.Gate != "" {
					return a.Gate
				}
				return def
			}
		}
	}
	return def
}

// jsonStrings returns the string values in s when s is a JSON value.
func jsonStrings(s string) []string {
	var v any
	if json.Unmarshal([]byte(strings.TrimSpace(s)), &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// classifierAnswer is the model's answer to the classifier: a verdict in
// its format, after some thinking when the prompt asks for it.
func classifierAnswer(verdict, prompt string) string {
	var sb strings.Builder
	if strings.Contains(prompt, "<thinking>") {
		sb.WriteString("<thinking>The script decides this action.</thinking>")
	}
	if verdict == Block {
		sb.WriteString("<block>yes</block><category>Scripted Block</category><reason>[Scripted Block] the model script blocks this action</reason>")
	} else {
		sb.WriteString("<block>no</block>")
	}
	return sb.String()
}

// jsonEscape is s as it appears inside a JSON string (without quotes, and
// without Go's HTML escaping, which JavaScript's JSON.stringify does not
// do).
func jsonEscape(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b := bytes.TrimSpace(buf.Bytes())
	return string(b[1 : len(b)-1])
}

// applyStop cuts text at the first of the request's stop sequences, as the
// API does; it returns the text, and the sequence that matched, if any.
func applyStop(text string, stops []string) (string, string) {
	at, seq := -1, ""
	for _, s := range stops {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
			at, seq = i, s
		}
	}
	if at < 0 {
		return text, ""
	}
	return text[:at], seq
}

// guardianMarker is in the input of Codex's guardian: the request it
// judges, which follows it as JSON.
const (
	guardianMarker = "Planned action JSON:"
	guardianEnd    = ">>> APPROVAL REQUEST END"
)

// isGuardian reports whether a Responses request is Codex's guardian's:
// it asks for the guardian's output schema and carries a planned action.
func isGuardian(body []byte) bool {
	var req struct {
		Text struct {
			Format struct {
				Schema struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"schema"`
			} `json:"format"`
		} `json:"text"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	_, outcome := req.Text.Format.Schema.Properties["outcome"]
	return outcome && bytes.Contains(body, []byte(jsonEscape(guardianMarker)))
}

// plannedAction is the action the guardian judges: the input text after
// its last guardianMarker, up to guardianEnd.
func plannedAction(body []byte) string {
	var req struct {
		Input []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	var sb strings.Builder
	for _, it := range req.Input {
		for _, c := range it.Content {
			sb.WriteString(c.Text)
		}
	}
	text := sb.String()
	if i := strings.LastIndex(text, guardianMarker); i >= 0 {
		text = text[i+len(guardianMarker):]
	}
	if i := strings.Index(text, guardianEnd); i >= 0 {
		text = text[:i]
	}
	return text
}

// guardianAnswer is the guardian's answer for a verdict.
func guardianAnswer(verdict string) string {
	a := map[string]string{"outcome": "allow", "risk_level": "low", "user_authorization": "high",
		"rationale": "The model script allows this action."}
	if verdict == Block {
		a = map[string]string{"outcome": "deny", "risk_level": "high", "user_authorization": "unknown",
			"rationale": "The model script denies this action."}
	}
	b, _ := json.Marshal(a)
	return string(b)
}
