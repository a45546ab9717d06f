package modelsrv

import (
	"bytes"
	"encoding/json"
	"strings"
)

// KindClassifier is a call of the agent's permission classifier: Claude
// Code's auto mode sends each action it is about to run to the model, with
// a system prompt asking for "<block>yes</block>" or "<block>no</block>",
// first in a short stage (stopped at "</block>") and, when that blocks, in
// a second stage that thinks first. The server answers with the script's
// Gate verdict for the action.
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
// judges: that of the first scripted action the entry names (its command,
// or its path), else Script.Gate, else Allow.
func (s *Server) verdict(entry string) string {
	def := s.script.Gate
	if def == "" {
		def = Allow
	}
	for _, st := range s.script.Steps {
		for _, a := range st.Calls {
			key := a.Command
			if a.Kind != Shell {
				key = a.Path
			}
			if key == "" || !strings.Contains(entry, jsonEscape(key)) {
				continue
			}
			if a.Gate != "" {
				return a.Gate
			}
			return def
		}
	}
	return def
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
