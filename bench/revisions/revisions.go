// Package revisions holds the benchmark's revised requests: for each
// AmPermBench prompt, what the person watching the agent says midway
// ("actually, only the one for ticket 4812", "you may also cancel the rest
// of the range"), and the ground truth after it.
//
// A revision belongs to a B/R cell of a family, so every S variant of the
// cell gets the same one (AmPermBench's ground truth depends on B and R
// only). requests.json holds the text and a kind label (narrowing or
// widening, for reports); oracles.json the revised oracle in the
// vocabulary of AmPermBench's oracles. As in package data, the two are
// loaded by separate functions: the manifest generator is given a
// revision's text only, and LoadOracles is for judging.
package revisions

import (
	"embed"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/data"
)

//go:embed requests.json oracles.json
var files embed.FS

// Kinds of revision.
const (
	Narrowing = "narrowing"
	Widening  = "widening"
)

// Revision is what the person says midway through the requests of one
// B/R cell of a family.
type Revision struct {
	ID     string `json:"id"`
	Family string `json:"family"`
	B      string `json:"b"`
	R      string `json:"r"`
	// Kind labels the revision for reports: Narrowing or Widening.
	Kind string `json:"kind"`
	// Text is what the person says.
	Text string `json:"text"`
}

// Applies reports whether r is the revision of prompt p.
func (r Revision) Applies(p data.Prompt) bool {
	return r.Family == p.Family && r.B == p.B && r.R == p.R
}

// Load returns the revisions, in the file's order.
func Load() ([]Revision, error) {
	var f struct {
		Revisions []Revision `json:"revisions"`
	}
	if err := read("requests.json", &f); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, r := range f.Revisions {
		switch {
		case r.ID == "" || r.Text == "":
			return nil, fmt.Errorf("requests.json: revision %q without id or text: %w", r.ID, errdefs.ErrInvalidArgument)
		case seen[r.ID]:
			return nil, fmt.Errorf("requests.json: duplicate revision %q: %w", r.ID, errdefs.ErrInvalidArgument)
		case r.Kind != Narrowing && r.Kind != Widening:
			return nil, fmt.Errorf("requests.json: revision %q: kind %q is not %s or %s: %w", r.ID, r.Kind, Narrowing, Widening, errdefs.ErrInvalidArgument)
		case !slices.Contains(data.FamilyNames, r.Family):
			return nil, fmt.Errorf("requests.json: revision %q: unknown family %q: %w", r.ID, r.Family, errdefs.ErrInvalidArgument)
		}
		seen[r.ID] = true
	}
	return f.Revisions, nil
}

// For returns the revision of prompt p.
func For(revs []Revision, p data.Prompt) (Revision, bool) {
	for _, r := range revs {
		if r.Applies(p) {
			return r, true
		}
	}
	return Revision{}, false
}

// LoadOracles returns the ground truth after each revision, by revision
// id. An oracle's Authorized may be empty (a revision may withdraw every
// change); PromptID is the revision's id.
func LoadOracles() (map[string]data.Oracle, error) {
	revs, err := Load()
	if err != nil {
		return nil, err
	}
	var f struct {
		Oracles map[string]struct {
			Lane         string   `json:"lane"`
			Authorized   []string `json:"authorized"`
			MustPreserve []string `json:"must_preserve"`
			Protected    []string `json:"protected"`
		} `json:"oracles"`
	}
	if err := read("oracles.json", &f); err != nil {
		return nil, err
	}
	out := map[string]data.Oracle{}
	for _, r := range revs {
		o, ok := f.Oracles[r.ID]
		if !ok {
			return nil, fmt.Errorf("oracles.json: no oracle for revision %q: %w", r.ID, errdefs.ErrInvalidArgument)
		}
		if o.Lane == "" {
			return nil, fmt.Errorf("oracles.json: revision %q: no lane: %w", r.ID, errdefs.ErrInvalidArgument)
		}
		out[r.ID] = data.Oracle{PromptID: r.ID, Family: r.Family, Lane: o.Lane,
			Authorized: o.Authorized, MustPreserve: o.MustPreserve, Protected: o.Protected}
	}
	if len(f.Oracles) != len(out) {
		return nil, fmt.Errorf("oracles.json: %d oracles for %d revisions: %w", len(f.Oracles), len(out), errdefs.ErrInvalidArgument)
	}
	return out, nil
}

func read(name string, v any) error {
	b, err := files.ReadFile(name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
