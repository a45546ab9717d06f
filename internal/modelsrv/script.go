package modelsrv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
)

// Script is what the model says in one session of an agent: the tool calls
// of each of its turns, then its final message.
type Script struct {
	// Steps are the model's tool-calling turns, in order: the first answers
	// the user's prompt, each next one the results of the one before.
	Steps []Step `json:"steps"`
	// Final is the model's last message, sent once every step has had its
	// results (and to any main call after that).
	Final string `json:"final"`
	// Side is what the model answers to the agent's side calls (titles,
	// summaries, topic checks: a call that does not offer the agent's shell
	// tool). DefaultSide if empty.
	Side string `json:"side,omitempty"`
	// Gate is how the model answers the agent's permission classifier
	// (Claude Code's auto mode asks the model whether to block each
	// action): Allow (the default) or Block, for every action whose own
	// Gate does not say.
	Gate string `json:"gate,omitempty"`
}

// Gate verdicts.
const (
	Allow = "allow"
	Block = "block"
)

// DefaultSide answers side calls when Script.Side is empty.
const DefaultSide = "ok"

// Step is one turn of the model: some text, then the tool calls, all in
// one response.
type Step struct {
	// Text is said before the calls (may be empty).
	Text string `json:"text,omitempty"`
	// Calls are the tool calls of the turn, at least one.
	Calls []Action `json:"calls"`
}

// Action kinds.
const (
	// Shell runs Command through the agent's shell tool (Claude Code's
	// Bash, Codex's exec_command).
	Shell = "shell"
	// Write creates the file Path with Content (Claude Code's Write,
	// Codex's apply_patch "Add File"). Claude Code replaces a file only
	// after it was read in the session.
	Write = "write"
	// Edit replaces Old, which must occur once, with New in the file Path
	// (Claude Code's Edit, which needs the file to have been read or
	// written in the session first; Codex's apply_patch "Update File",
	// Old and New as whole lines).
	Edit = "edit"
	// Read reads the file Path (Claude Code's Read; Codex has no read tool:
	// it is a shell `cat`).
	Read = "read"
	// Tool calls the agent's tool Name with the JSON arguments Input as
	// they are: for tools the other kinds do not cover.
	Tool = "tool"
)

// Action is one tool call.
type Action struct {
	Kind    string          `json:"kind"`
	Command string          `json:"command,omitempty"` // Shell
	Path    string          `json:"path,omitempty"`    // Write, Edit, Read
	Content string          `json:"content,omitempty"` // Write
	Old     string          `json:"old,omitempty"`     // Edit
	New     string          `json:"new,omitempty"`     // Edit
	Name    string          `json:"name,omitempty"`    // Tool
	Input   json.RawMessage `json:"input,omitempty"`   // Tool
	// Gate is the classifier's verdict on this action (Allow or Block;
	// Script.Gate if empty).
	Gate string `json:"gate,omitempty"`
	// Escalate asks to run a Shell command outside the agent's own sandbox
	// (Codex: sandbox_permissions "require_escalated", which its approval
	// policy or auto review then decides; Claude Code:
	// dangerouslyDisableSandbox).
	Escalate bool `json:"escalate,omitempty"`
}

// RunShell is a Shell action.
func RunShell(cmd string) Action { return Action{Kind: Shell, Command: cmd} }

// WriteFile is a Write action.
func WriteFile(path, content string) Action {
	return Action{Kind: Write, Path: path, Content: content}
}

// EditFile is an Edit action.
func EditFile(path, old, new string) Action {
	return Action{Kind: Edit, Path: path, Old: old, New: new}
}

// ReadFile is a Read action.
func ReadFile(path string) Action { return Action{Kind: Read, Path: path} }

// Validate reports what is wrong with the script, if anything.
func (s *Script) Validate() error {
	var errs []error
	if err := validGate(s.Gate); err != nil {
		errs = append(errs, err)
	}
	for i, st := range s.Steps {
		if len(st.Calls) == 0 {
			errs = append(errs, fmt.Errorf("step %d: no calls (a turn without calls is the final message)", i))
		}
		for j, a := range st.Calls {
			if err := a.validate(); err != nil {
				errs = append(errs, fmt.Errorf("step %d call %d: %w", i, j, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model script: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validGate(g string) error {
	if g != "" && g != Allow && g != Block {
		return fmt.Errorf("gate %q: want %q or %q", g, Allow, Block)
	}
	return nil
}

func (a Action) validate() error {
	if err := validGate(a.Gate); err != nil {
		return err
	}
	if a.Escalate && a.Kind != Shell {
		return fmt.Errorf("%s: only a shell command escalates", a.Kind)
	}
	need := func(field, v string) error {
		if v == "" {
			return fmt.Errorf("%s: %s is required", a.Kind, field)
		}
		return nil
	}
	switch a.Kind {
	case Shell:
		return need("command", a.Command)
	case Write:
		return need("path", a.Path)
	case Edit:
		if err := need("path", a.Path); err != nil {
			return err
		}
		return need("old", a.Old)
	case Read:
		return need("path", a.Path)
	case Tool:
		if err := need("name", a.Name); err != nil {
			return err
		}
		if len(a.Input) == 0 {
			return nil
		}
		var m map[string]any
		if err := json.Unmarshal(a.Input, &m); err != nil {
			return fmt.Errorf("tool %s: input is not a JSON object: %w", a.Name, err)
		}
		return nil
	case "":
		return errors.New("kind is required")
	default:
		return fmt.Errorf("unknown kind %q (want %s)", a.Kind, strings.Join([]string{Shell, Write, Edit, Read, Tool}, ", "))
	}
}

// DecodeScript reads a script from JSON, refusing unknown fields, and
// validates it.
func DecodeScript(data []byte) (*Script, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("model script: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if dec.More() {
		return nil, fmt.Errorf("model script: trailing data after the script: %w", errdefs.ErrInvalidArgument)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}
