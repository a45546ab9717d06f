// Package data loads AmPermBench's task families, prompts and oracles (the
// files in ../shared/bench/ampermbench beside the module root) into typed
// values.
//
// Oracles are loaded by their own function, LoadOracles, and nothing else in
// this package reads oracles.json: code that must not see the ground truth,
// such as the manifest generator, uses LoadFamilies and LoadPrompts only.
// Family deliberately carries no oracle rule or evaluator summary either,
// although families.json has them.
package data

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/effect"
)

// File names inside a data directory.
const (
	FamiliesFile = "families.json"
	PromptsFile  = "prompts.json"
	OraclesFile  = "oracles.json"
)

// EnvDir overrides the default data directory.
const EnvDir = "AIRLOCK_AMPERMBENCH_DIR"

// modulePath identifies the module root when searching upwards for go.mod.
const modulePath = "github.com/airlock-sandbox/airlock"

// The four AmPermBench families, in the source's order.
const (
	CleanUpBranches  = "clean-up-branches"
	CancelJobs       = "cancel-jobs"
	RestartServices  = "restart-services"
	CleanUpArtifacts = "clean-up-artifacts"
)

// FamilyNames lists the families in the source's order.
var FamilyNames = []string{CleanUpBranches, CancelJobs, RestartServices, CleanUpArtifacts}

// Lanes of the branches family: where a ref lives.
const (
	LaneLocal  = "local"
	LaneRemote = "remote"
)

// RemotePrefix starts the name of a ref on the shared-history side.
const RemotePrefix = "origin/"

// DefaultDir returns the data directory: $AIRLOCK_AMPERMBENCH_DIR if set,
// else ../shared/bench/ampermbench relative to the module root found by
// walking up from the working directory.
func DefaultDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(root), "shared", "bench", "ampermbench"), nil
}

// moduleRoot walks up from dir to the directory whose go.mod declares the
// airlock module.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		if isModuleRoot(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod for module %s above %s (set %s): %w", modulePath, dir, EnvDir, errdefs.ErrNotFound)
		}
		d = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(mod) == modulePath
		}
	}
	return false
}

// Families is families.json.
type Families struct {
	ActingUser string
	// Order lists the family names in the source's order.
	Order  []string
	byName map[string]*Family
}

// NewFamilies returns the families fams, in that order, acting as
// actingUser (an operator's suite: one family of its own).
func NewFamilies(actingUser string, fams ...*Family) *Families {
	out := &Families{ActingUser: actingUser, byName: map[string]*Family{}}
	for _, f := range fams {
		out.Order = append(out.Order, f.Name)
		out.byName[f.Name] = f
	}
	return out
}

// Get returns the family called name.
func (f *Families) Get(name string) (*Family, error) {
	fam, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("family %q (known: %s): %w", name, strings.Join(f.Order, ", "), errdefs.ErrNotFound)
	}
	return fam, nil
}

// All returns the families in the source's order.
func (f *Families) All() []*Family {
	out := make([]*Family, 0, len(f.Order))
	for _, n := range f.Order {
		out = append(out, f.byName[n])
	}
	return out
}

// Family is one task family: its prompt templates and slot texts (the
// language of the requests) and its initial state (the fixture).
type Family struct {
	Name       string
	Prefix     string // CB, CJ, RS, CA
	ActingUser string
	// STemplates, BSlots and RSlots are keyed by axis value (S0, B2, R1).
	STemplates map[string]string
	BSlots     map[string]BSlot
	RSlots     map[string]map[string]string
	// Exactly one of the fixture lists is set, by family.
	Branches []Branch
	Jobs     []Job
	Services []Service
	Objects  []Object
	// Bucket is the object store bucket (clean-up-artifacts).
	Bucket string
}

// BSlot is a B-axis slot: how the request refers to its target.
type BSlot struct {
	Ref    string `json:"ref"`
	RefCap string `json:"ref_cap"`
}

// Branch is one ref of the git fixture. Name is the oracle's spelling:
// "alex/x" for a local branch, "origin/alex/x" for the remote one.
type Branch struct {
	Name      string `json:"-"`
	Owner     string `json:"owner"`
	Stale     bool   `json:"stale"`
	Protected bool   `json:"protected"`
	Radius    string `json:"radius"`
}

// Remote reports whether b lives on the shared-history side.
func (b Branch) Remote() bool { return strings.HasPrefix(b.Name, RemotePrefix) }

// Short returns the branch name without the "origin/" prefix.
func (b Branch) Short() string { return strings.TrimPrefix(b.Name, RemotePrefix) }

// Job is one job of the scheduler fixture.
type Job struct {
	ID          string `json:"job_id"`
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Queue       string `json:"queue"`
	Status      string `json:"status"`
	Stale       bool   `json:"stale"`
	Protected   bool   `json:"protected"`
	CreatedAt   string `json:"created_at"`
	Priority    string `json:"priority"`
	ImpactLevel string `json:"impact_level"`
}

// Service is one service of the controller fixture.
type Service struct {
	ID           string `json:"service_id"`
	Name         string `json:"name"`
	Component    string `json:"component"`
	Owner        string `json:"owner"`
	Env          string `json:"env"`
	Health       string `json:"health"`
	Protected    bool   `json:"protected"`
	ImpactLevel  string `json:"impact_level"`
	RestartCount int    `json:"restart_count"`
}

// Object is one object of the object store fixture.
type Object struct {
	ID          string `json:"object_id"`
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	NS          string `json:"ns"`
	Kind        string `json:"kind"`
	Status      string `json:"status"`
	Stale       bool   `json:"stale"`
	Protected   bool   `json:"protected"`
	ImpactLevel string `json:"impact_level"`
}

// Item is a fixture entry in the vocabulary shared by every family: the
// oracle's name for it, its owner, and its lane (a ref's side, a job's
// queue, a service's env, an object's namespace).
type Item struct {
	ID        string
	Owner     string
	Lane      string
	Protected bool
	Stale     bool
}

// Items returns the fixture as Items, in fixture order.
func (f *Family) Items() []Item {
	var out []Item
	for _, b := range f.Branches {
		lane := LaneLocal
		if b.Remote() {
			lane = LaneRemote
		}
		out = append(out, Item{ID: b.Name, Owner: b.Owner, Lane: lane, Protected: b.Protected, Stale: b.Stale})
	}
	for _, j := range f.Jobs {
		out = append(out, Item{ID: j.ID, Owner: j.Owner, Lane: j.Queue, Protected: j.Protected, Stale: j.Stale})
	}
	for _, s := range f.Services {
		out = append(out, Item{ID: s.ID, Owner: s.Owner, Lane: s.Env, Protected: s.Protected})
	}
	for _, o := range f.Objects {
		out = append(out, Item{ID: o.ID, Owner: o.Owner, Lane: o.NS, Protected: o.Protected, Stale: o.Stale})
	}
	return out
}

// Item returns the fixture entry called id.
func (f *Family) Item(id string) (Item, bool) {
	for _, it := range f.Items() {
		if it.ID == id {
			return it, true
		}
	}
	return Item{}, false
}

// Lanes returns the distinct lanes of the fixture, in fixture order.
func (f *Family) Lanes() []string {
	var out []string
	for _, it := range f.Items() {
		if !slices.Contains(out, it.Lane) {
			out = append(out, it.Lane)
		}
	}
	return out
}

// Owners returns the distinct owners of the fixture, in fixture order.
func (f *Family) Owners() []string {
	var out []string
	for _, it := range f.Items() {
		if !slices.Contains(out, it.Owner) {
			out = append(out, it.Owner)
		}
	}
	return out
}

// rawFamilies mirrors the parts of families.json this package reads.
type rawFamilies struct {
	ActingUser       string `json:"acting_user"`
	PromptGeneration struct {
		TaskOrder []string `json:"task_order_in_TASK_SPECS"`
	} `json:"prompt_generation"`
	Families map[string]rawFamily `json:"families"`
}

type rawFamily struct {
	Prefix       string                       `json:"prefix"`
	ActingUser   string                       `json:"acting_user"`
	STemplates   map[string]string            `json:"S_TEMPLATES"`
	BSlots       map[string]BSlot             `json:"B_SLOTS"`
	RSlots       map[string]map[string]string `json:"R_SLOTS"`
	Bucket       string                       `json:"bucket"`
	InitialState struct {
		Branches map[string]Branch `json:"branches"`
		Jobs     []Job             `json:"jobs"`
		Services []Service         `json:"services"`
		Objects  []Object          `json:"objects"`
	} `json:"initial_state"`
	GitFixture struct {
		Snapshot struct {
			Local  []string `json:"local"`
			Remote []string `json:"remote"`
		} `json:"snapshot_after_reset_runner_format"`
	} `json:"git_fixture"`
}

// LoadFamilies reads dir/families.json.
func LoadFamilies(dir string) (*Families, error) {
	var raw rawFamilies
	if err := readJSON(filepath.Join(dir, FamiliesFile), &raw); err != nil {
		return nil, err
	}
	out := &Families{ActingUser: raw.ActingUser, byName: map[string]*Family{}}
	order := raw.PromptGeneration.TaskOrder
	if len(order) == 0 {
		order = FamilyNames
	}
	for _, name := range order {
		rf, ok := raw.Families[name]
		if !ok {
			return nil, fmt.Errorf("%s: family %q is listed but missing: %w", FamiliesFile, name, errdefs.ErrInvalidArgument)
		}
		fam, err := rf.family(name)
		if err != nil {
			return nil, fmt.Errorf("%s: family %q: %w", FamiliesFile, name, err)
		}
		out.Order = append(out.Order, name)
		out.byName[name] = fam
	}
	if len(raw.Families) != len(out.Order) {
		return nil, fmt.Errorf("%s: %d families, %d in the task order: %w", FamiliesFile, len(raw.Families), len(out.Order), errdefs.ErrInvalidArgument)
	}
	return out, nil
}

func (rf rawFamily) family(name string) (*Family, error) {
	f := &Family{
		Name:       name,
		Prefix:     rf.Prefix,
		ActingUser: rf.ActingUser,
		STemplates: rf.STemplates,
		BSlots:     rf.BSlots,
		RSlots:     rf.RSlots,
		Jobs:       rf.InitialState.Jobs,
		Services:   rf.InitialState.Services,
		Objects:    rf.InitialState.Objects,
		Bucket:     rf.Bucket,
	}
	if len(rf.InitialState.Branches) > 0 {
		// Map order is lost in JSON decoding; the runner snapshot lists
		// every ref, so take the order from there: local refs, then remote.
		order := append(slices.Clone(rf.GitFixture.Snapshot.Local), rf.GitFixture.Snapshot.Remote...)
		if len(order) != len(rf.InitialState.Branches) {
			order = order[:0]
			for n := range rf.InitialState.Branches {
				order = append(order, n)
			}
			slices.Sort(order)
		}
		for _, n := range order {
			b, ok := rf.InitialState.Branches[n]
			if !ok {
				return nil, fmt.Errorf("snapshot ref %q has no metadata: %w", n, errdefs.ErrInvalidArgument)
			}
			b.Name = n
			f.Branches = append(f.Branches, b)
		}
	}
	switch {
	case f.Prefix == "":
		return nil, fmt.Errorf("no prefix: %w", errdefs.ErrInvalidArgument)
	case len(f.STemplates) == 0 || len(f.BSlots) == 0 || len(f.RSlots) == 0:
		return nil, fmt.Errorf("missing S/B/R templates or slots: %w", errdefs.ErrInvalidArgument)
	case len(f.Items()) == 0:
		return nil, fmt.Errorf("empty initial state: %w", errdefs.ErrInvalidArgument)
	}
	return f, nil
}

// Prompt is one record of prompts.json.
type Prompt struct {
	ID     string `json:"prompt_id"`
	Family string `json:"family"`
	S      string `json:"s_axis"`
	B      string `json:"b_axis"`
	R      string `json:"r_axis"`
	Text   string `json:"prompt"`
}

// Axes parses a prompt id of the form PREFIX-Sn-Bn-Rn.
func Axes(id string) (prefix, s, b, r string, err error) {
	parts := strings.Split(id, "-")
	if len(parts) != 4 || parts[0] == "" {
		return "", "", "", "", fmt.Errorf("prompt id %q is not PREFIX-Sn-Bn-Rn: %w", id, errdefs.ErrInvalidArgument)
	}
	for i, axis := range []byte{'S', 'B', 'R'} {
		p := parts[i+1]
		if len(p) < 2 || p[0] != axis || strings.Trim(p[1:], "0123456789") != "" {
			return "", "", "", "", fmt.Errorf("prompt id %q: %q is not a %c-axis value: %w", id, p, axis, errdefs.ErrInvalidArgument)
		}
	}
	return parts[0], parts[1], parts[2], parts[3], nil
}

// LoadPrompts reads dir/prompts.json and checks that every record's id
// agrees with its axis fields.
func LoadPrompts(dir string) ([]Prompt, error) {
	var ps []Prompt
	if err := readJSON(filepath.Join(dir, PromptsFile), &ps); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, p := range ps {
		_, s, b, r, err := Axes(p.ID)
		if err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", PromptsFile, i, err)
		}
		if s != p.S || b != p.B || r != p.R {
			return nil, fmt.Errorf("%s: record %d: id %q disagrees with axes %s/%s/%s: %w", PromptsFile, i, p.ID, p.S, p.B, p.R, errdefs.ErrInvalidArgument)
		}
		if p.Family == "" || p.Text == "" {
			return nil, fmt.Errorf("%s: record %d (%s): missing family or prompt: %w", PromptsFile, i, p.ID, errdefs.ErrInvalidArgument)
		}
		if seen[p.ID] {
			return nil, fmt.Errorf("%s: duplicate prompt id %q: %w", PromptsFile, p.ID, errdefs.ErrInvalidArgument)
		}
		seen[p.ID] = true
	}
	return ps, nil
}

// Oracle is the ground truth of one prompt.
type Oracle struct {
	PromptID string
	Family   string
	// Lane is the authorized lane: "local"/"remote" (branches), a queue,
	// an env or a namespace.
	Lane string
	// Authorized are the items the request authorizes changing, in the
	// oracle's names.
	Authorized   []string
	MustPreserve []string
	Protected    []string
	// Effects, when set, is the oracle of an operator's suite
	// (bench/suite): the effects the request authorizes, by op and
	// target, of any op; Lane and Authorized are then unused.
	Effects []effect.Effect `json:",omitempty"`
}

// oracleFields names each family's oracle keys (the source's field names).
var oracleFields = map[string]struct{ lane, set, protected string }{
	CleanUpBranches:  {"authorized_scope", "authorized_delete_set", "protected_refs"},
	CancelJobs:       {"authorized_queue", "authorized_cancel_set", "protected_jobs"},
	RestartServices:  {"authorized_env", "authorized_restart_set", "protected_services"},
	CleanUpArtifacts: {"authorized_ns", "authorized_delete_set", "protected_objects"},
}

// prefixFamily maps a prompt id prefix to its family.
var prefixFamily = map[string]string{"CB": CleanUpBranches, "CJ": CancelJobs, "RS": RestartServices, "CA": CleanUpArtifacts}

// LoadOracles reads dir/oracles.json, keyed by prompt id.
func LoadOracles(dir string) (map[string]Oracle, error) {
	var raw map[string]map[string]json.RawMessage
	if err := readJSON(filepath.Join(dir, OraclesFile), &raw); err != nil {
		return nil, err
	}
	out := make(map[string]Oracle, len(raw))
	for id, fields := range raw {
		prefix, _, _, _, err := Axes(id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", OraclesFile, err)
		}
		fam, ok := prefixFamily[prefix]
		if !ok {
			return nil, fmt.Errorf("%s: %s: unknown family prefix %q: %w", OraclesFile, id, prefix, errdefs.ErrInvalidArgument)
		}
		names := oracleFields[fam]
		o := Oracle{PromptID: id, Family: fam}
		for _, f := range []struct {
			key string
			dst any
		}{
			{names.lane, &o.Lane},
			{names.set, &o.Authorized},
			{"must_preserve", &o.MustPreserve},
			{names.protected, &o.Protected},
		} {
			v, ok := fields[f.key]
			if !ok {
				return nil, fmt.Errorf("%s: %s: missing %q: %w", OraclesFile, id, f.key, errdefs.ErrInvalidArgument)
			}
			if err := json.Unmarshal(v, f.dst); err != nil {
				return nil, fmt.Errorf("%s: %s: %q: %w", OraclesFile, id, f.key, err)
			}
		}
		if o.Lane == "" || len(o.Authorized) == 0 {
			return nil, fmt.Errorf("%s: %s: empty lane or authorized set: %w", OraclesFile, id, errdefs.ErrInvalidArgument)
		}
		out[id] = o
	}
	return out, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", path, errors.Join(err, errdefs.ErrNotFound))
		}
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
