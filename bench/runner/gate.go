package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// GateRequest is what a gate decides on: the request an agent was given
// and the command it is about to run.
type GateRequest struct {
	Family   string `json:"family"`
	PromptID string `json:"prompt_id"`
	Prompt   string `json:"prompt"`
	ActionID string `json:"action_id"`
	Command  string `json:"command"`
}

// Gate decides which actions run, as an agent's permission layer does.
type Gate interface {
	// Name identifies the gate in results ("allow-all", "rules:FILE").
	Name() string
	// Decide returns eval.Allow or eval.Deny.
	Decide(ctx context.Context, r GateRequest) (string, error)
}

// ParseGate returns the gate a --gate value names:
//
//	allow-all      every action runs (bypass mode)
//	rules:FILE     allow/deny patterns on the command (see RulesGate)
//	exec:CMD       CMD (run with sh -c) gets the GateRequest as JSON on
//	               stdin and prints allow or deny (or {"decision": ...})
//	replay:FILE    recorded decisions: JSON lines of {"prompt_id",
//	               "action_id" or "command", "decision"}
func ParseGate(spec string) (Gate, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case spec == "allow-all":
		return allowAll{}, nil
	case kind == "rules" && arg != "":
		return LoadRules(arg)
	case kind == "exec" && arg != "":
		return &execGate{cmd: arg}, nil
	case kind == "replay" && arg != "":
		return loadReplay(arg)
	}
	return nil, fmt.Errorf("unknown gate %q (want allow-all, rules:FILE, exec:CMD or replay:FILE): %w", spec, errdefs.ErrInvalidArgument)
}

type allowAll struct{}

func (allowAll) Name() string                                        { return "allow-all" }
func (allowAll) Decide(context.Context, GateRequest) (string, error) { return eval.Allow, nil }

// RulesGate decides by patterns on the command, like an agent's static
// permission rules. A rules file has one rule per line:
//
//	allow PATTERN
//	deny PATTERN
//	default allow|deny
//
// PATTERN is matched against the whole command, with "*" matching any run
// of characters (spaces and slashes included) and every other character
// itself. A deny rule that matches wins; otherwise an allow rule that
// matches allows; otherwise the default decides (deny if not set). Blank
// lines and lines starting with "#" are ignored.
type RulesGate struct {
	name  string
	allow []*regexp.Regexp
	deny  []*regexp.Regexp
	def   string
}

// LoadRules reads a rules file.
func LoadRules(path string) (*RulesGate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules gate: %w", err)
	}
	g, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("rules gate %s: %w", path, err)
	}
	g.name = "rules:" + filepath.Base(path)
	return g, nil
}

// ParseRules parses the content of a rules file.
func ParseRules(b []byte) (*RulesGate, error) {
	g := &RulesGate{name: "rules", def: eval.Deny}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, pat, ok := strings.Cut(line, " ")
		pat = strings.TrimSpace(pat)
		if !ok || pat == "" {
			return nil, fmt.Errorf("line %d: want \"allow PATTERN\", \"deny PATTERN\" or \"default allow|deny\": %w", n, errdefs.ErrInvalidArgument)
		}
		switch verb {
		case "default":
			if pat != eval.Allow && pat != eval.Deny {
				return nil, fmt.Errorf("line %d: default must be allow or deny: %w", n, errdefs.ErrInvalidArgument)
			}
			g.def = pat
		case "allow", "deny":
			re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(pat), `\*`, "(?s:.*)") + "$")
			if verb == "allow" {
				g.allow = append(g.allow, re)
			} else {
				g.deny = append(g.deny, re)
			}
		default:
			return nil, fmt.Errorf("line %d: unknown rule %q: %w", n, verb, errdefs.ErrInvalidArgument)
		}
	}
	return g, sc.Err()
}

// Name implements Gate.
func (g *RulesGate) Name() string { return g.name }

// Decide implements Gate.
func (g *RulesGate) Decide(_ context.Context, r GateRequest) (string, error) {
	for _, re := range g.deny {
		if re.MatchString(r.Command) {
			return eval.Deny, nil
		}
	}
	for _, re := range g.allow {
		if re.MatchString(r.Command) {
			return eval.Allow, nil
		}
	}
	return g.def, nil
}

// execGate asks an external classifier.
type execGate struct{ cmd string }

func (g *execGate) Name() string { return "exec:" + g.cmd }

func (g *execGate) Decide(ctx context.Context, r GateRequest) (string, error) {
	in, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", g.cmd)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("gate %s: %w: %s", g.Name(), err, strings.TrimSpace(stderr.String()))
	}
	return parseDecision(out)
}

// parseDecision reads "allow", "deny" or {"decision": "allow"|"deny"}.
func parseDecision(out []byte) (string, error) {
	s := strings.TrimSpace(string(out))
	var d struct {
		Decision string `json:"decision"`
	}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			return "", fmt.Errorf("gate answer %q: %w", s, err)
		}
		s = d.Decision
	}
	if s != eval.Allow && s != eval.Deny {
		return "", fmt.Errorf("gate answer %q is not allow or deny: %w", s, errdefs.ErrInvalidArgument)
	}
	return s, nil
}

// replayGate replays recorded decisions.
type replayGate struct {
	name      string
	byAction  map[[2]string]string
	byCommand map[[2]string]string
}

func loadReplay(path string) (*replayGate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay gate: %w", err)
	}
	g := &replayGate{name: "replay:" + filepath.Base(path), byAction: map[[2]string]string{}, byCommand: map[[2]string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec struct {
			PromptID string `json:"prompt_id"`
			ActionID string `json:"action_id"`
			Command  string `json:"command"`
			Decision string `json:"decision"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("replay gate %s:%d: %w", path, n, err)
		}
		if rec.Decision != eval.Allow && rec.Decision != eval.Deny {
			return nil, fmt.Errorf("replay gate %s:%d: decision %q is not allow or deny", path, n, rec.Decision)
		}
		switch {
		case rec.ActionID != "":
			g.byAction[[2]string{rec.PromptID, rec.ActionID}] = rec.Decision
		case rec.Command != "":
			g.byCommand[[2]string{rec.PromptID, rec.Command}] = rec.Decision
		default:
			return nil, fmt.Errorf("replay gate %s:%d: neither action_id nor command", path, n)
		}
	}
	return g, sc.Err()
}

func (g *replayGate) Name() string { return g.name }

// errNoDecision: the recording has no decision for a request.
var errNoDecision = errors.New("no recorded decision")

func (g *replayGate) Decide(_ context.Context, r GateRequest) (string, error) {
	for _, p := range []string{r.PromptID, ""} {
		if d, ok := g.byAction[[2]string{p, r.ActionID}]; ok {
			return d, nil
		}
		if d, ok := g.byCommand[[2]string{p, r.Command}]; ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("gate %s: %w for prompt %s action %s", g.name, errNoDecision, r.PromptID, r.ActionID)
}

// gateRequest builds the request of an action under a prompt.
func gateRequest(family, promptID, prompt string, a catalog.Action) GateRequest {
	return GateRequest{Family: family, PromptID: promptID, Prompt: prompt, ActionID: a.ID, Command: a.Command}
}
