package world

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

// extraState is the state of the services that LoadState loads: the
// tracker, the model registry, the package registry and the paste site.
//
// The live records are copied from the loaded ones by reset, shallowly:
// an issue's slices (labels, comments, ...) are shared with the loaded
// state and with snapshots, so the services never write them in place
// (a change makes a new slice), as objects' contents are never written.
type extraState struct {
	// loaded is the state LoadState was given, validated and normalized.
	loaded worldapi.ExtraState
	tokens []staticToken
	files  fileIndex

	issues   []worldapi.Issue
	models   []worldapi.ModelVersion
	packages []worldapi.Package
	// uses counts, by token name, the state-changing requests accepted
	// on the strength of a static registry token.
	uses   map[string]int
	pastes []paste
}

// staticToken is a registry token with its scopes parsed.
type staticToken struct {
	worldapi.RegistryToken
	claims *verify.Claims
}

// paste is a document of the paste site and its content.
type paste struct {
	meta Paste
	data []byte
}

// Paste is a document of the paste site, as a Snapshot holds it.
type Paste struct {
	Key    string `json:"key"`
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
	// File is the workspace file whose content the paste is (see
	// LoadState), "" if none.
	File string `json:"file,omitempty"`
}

// pasteTarget names a paste as effects do: "paste:PATH" for a workspace
// file's content, else "paste:sha256:" and the first 12 hex digits of the
// content's SHA-256.
func pasteTarget(p *Paste) string {
	if p.File != "" {
		return "paste:" + p.File
	}
	return "paste:sha256:" + p.SHA256[:12]
}

// reset puts the live records back to the loaded state.
func (x *extraState) reset() {
	x.issues = cloneOrNil(x.loaded.Issues)
	x.models = cloneOrNil(x.loaded.Models)
	x.packages = cloneOrNil(x.loaded.Packages)
	x.uses = nil
	x.pastes = nil
}

// clone returns a copy of x that shares nothing x's services change.
func (x *extraState) clone() extraState {
	c := *x
	c.issues = slices.Clone(x.issues)
	c.models = slices.Clone(x.models)
	c.packages = slices.Clone(x.packages)
	c.uses = maps.Clone(x.uses)
	c.pastes = slices.Clone(x.pastes)
	return c
}

// use records a state-changing request accepted with the static token
// name.
func (x *extraState) use(name string) {
	if x.uses == nil {
		x.uses = map[string]int{}
	}
	x.uses[name]++
}

// staticToken returns the registry token whose secret is raw.
func (x *extraState) staticToken(raw string) (*staticToken, bool) {
	for i := range x.tokens {
		if subtle.ConstantTimeCompare([]byte(x.tokens[i].Secret), []byte(raw)) == 1 {
			return &x.tokens[i], true
		}
	}
	return nil, false
}

func cloneOrNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// LoadState loads st into the tracker, the model registry, the package
// registry and the paste site, replacing what was loaded before, and puts
// them in that state (the other services are not touched). Every later
// Reset puts them back to it; the zero ExtraState empties them again.
//
// The state is checked whole: an error names every bad record (by its
// field and index) and loads nothing. Empty values take their default: an
// issue's state "open", a model version's stage "none" and approval
// "pending". Issues are unique by repository and number, model versions
// by name and version, packages by repository, name and version (the
// repository "test" or "prod"), registry tokens by name and by secret,
// and their scopes must be packages.* scopes. Workspace paths are
// relative, clean and slash-separated.
//
// The paste site names a paste by the workspace file whose content it is:
// equal, or equal once every CR and LF is removed (what curl -d @FILE
// sends), or equal but for trailing white space; of several such files,
// the first in path order.
func (w *World) LoadState(st worldapi.ExtraState) error {
	loaded, tokens, err := checkState(st)
	if err != nil {
		return err
	}
	files := newFileIndex(loaded.Workspace)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.extra = extraState{loaded: loaded, tokens: tokens, files: files}
	w.extra.reset()
	return nil
}

// LoadedState returns a copy of the state LoadState loaded.
func (w *World) LoadedState() worldapi.ExtraState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return cloneState(w.extra.loaded)
}

// HasRegistryToken reports whether secret is the secret of one of the
// loaded registry tokens.
func (w *World) HasRegistryToken(secret string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.extra.staticToken(secret)
	return ok
}

// checkState validates and normalizes st, returning a deep copy and its
// registry tokens with their claims.
func checkState(st worldapi.ExtraState) (worldapi.ExtraState, []staticToken, error) {
	st = cloneState(st)
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("world: load state: "+format, args...))
	}
	empty := len(st.Issues) == 0 && len(st.Models) == 0 && len(st.Packages) == 0 &&
		len(st.RegistryTokens) == 0 && len(st.Workspace) == 0
	switch {
	case st.Family == "" && !empty:
		bad("family: required")
	case slices.Contains(fixture.Families, st.Family):
		bad("family %q: an AmPermBench family, whose services are the fixture's", st.Family)
	case strings.TrimSpace(st.Family) != st.Family:
		bad("family %q: surrounding white space", st.Family)
	}

	issues := map[string]int{}
	for i := range st.Issues {
		is := &st.Issues[i]
		id := worldapi.IssueTarget(is.Repo, is.Number)
		at := fmt.Sprintf("issues[%d] (%s)", i, id)
		if is.Repo == "" || strings.ContainsAny(is.Repo, "#/ ") {
			bad("%s: repo %q: want a non-empty name without '#', '/' or spaces", at, is.Repo)
		}
		if is.Number <= 0 {
			bad("%s: number %d: want a positive number", at, is.Number)
		}
		if j, ok := issues[id]; ok {
			bad("%s: the same issue as issues[%d]", at, j)
		}
		issues[id] = i
		if is.State == "" {
			is.State = worldapi.IssueOpen
		}
		switch {
		case is.State != worldapi.IssueOpen && is.State != worldapi.IssueClosed:
			bad("%s: state %q: want %q or %q", at, is.State, worldapi.IssueOpen, worldapi.IssueClosed)
		case is.StateReason != "" && !validReason(is.StateReason):
			bad("%s: state_reason %q: want \"\", %q, %q or %q", at, is.StateReason, worldapi.ReasonCompleted, worldapi.ReasonNotPlanned, worldapi.ReasonSuperseded)
		case is.State == worldapi.IssueOpen && is.StateReason != "":
			bad("%s: state_reason %q on an open issue", at, is.StateReason)
		}
		for _, l := range is.Labels {
			if strings.TrimSpace(l) == "" {
				bad("%s: an empty label", at)
			}
		}
		is.Assignees, is.Labels, is.LinkedPRs, is.Comments = orEmpty(is.Assignees), orEmpty(is.Labels), orEmpty(is.LinkedPRs), orEmpty(is.Comments)
	}

	models := map[string]int{}
	for i := range st.Models {
		m := &st.Models[i]
		id := m.Name + "@" + m.Version
		at := fmt.Sprintf("models[%d] (%s)", i, id)
		if m.Name == "" || m.Version == "" || strings.ContainsAny(m.Name+m.Version, "@:/") {
			bad("%s: name and version: want both, without '@', ':' or '/'", at)
		}
		if j, ok := models[id]; ok {
			bad("%s: the same version as models[%d]", at, j)
		}
		models[id] = i
		if m.Stage == "" {
			m.Stage = worldapi.StageNone
		}
		if m.Approval == "" {
			m.Approval = worldapi.ApprovalPending
		}
		if !slices.Contains([]string{worldapi.StageNone, worldapi.StageStaging, worldapi.StageProduction}, m.Stage) {
			bad("%s: stage %q: want %q, %q or %q", at, m.Stage, worldapi.StageNone, worldapi.StageStaging, worldapi.StageProduction)
		}
		if !slices.Contains([]string{worldapi.ApprovalApproved, worldapi.ApprovalPending, worldapi.ApprovalRejected}, m.Approval) {
			bad("%s: approval %q: want %q, %q or %q", at, m.Approval, worldapi.ApprovalApproved, worldapi.ApprovalPending, worldapi.ApprovalRejected)
		}
	}

	pkgs := map[string]int{}
	for i := range st.Packages {
		p := &st.Packages[i]
		id := worldapi.PackageTarget(p.Repo, p.Name, p.Version)
		at := fmt.Sprintf("packages[%d] (%s)", i, id)
		if !validPackageRepo(p.Repo) {
			bad("%s: repo %q: want %q or %q", at, p.Repo, worldapi.RepoTest, worldapi.RepoProd)
		}
		if p.Name == "" || p.Version == "" || strings.ContainsAny(p.Name+p.Version, "/@") {
			bad("%s: name and version: want both, without '/' or '@'", at)
		}
		if j, ok := pkgs[id]; ok {
			bad("%s: the same version as packages[%d]", at, j)
		}
		pkgs[id] = i
	}

	var tokens []staticToken
	names, secrets := map[string]int{}, map[string]int{}
	for i, t := range st.RegistryTokens {
		at := fmt.Sprintf("registry_tokens[%d] (%s)", i, t.Name)
		if t.Name == "" || strings.ContainsAny(t.Name, " \t\n") {
			bad("%s: name %q: want a non-empty name without blanks", at, t.Name)
		}
		if j, ok := names[t.Name]; ok {
			bad("%s: the same name as registry_tokens[%d]", at, j)
		}
		names[t.Name] = i
		if t.Secret == "" || strings.TrimSpace(t.Secret) != t.Secret || strings.ContainsAny(t.Secret, " \t\r\n") {
			bad("%s: secret: want a non-empty secret without blanks", at)
		} else if j, ok := secrets[t.Secret]; ok {
			bad("%s: the same secret as registry_tokens[%d]", at, j)
		}
		secrets[t.Secret] = i
		set, err := scope.ParseSet(t.Scopes)
		if err != nil {
			bad("%s: scopes: %v", at, err)
			continue
		}
		for _, s := range set {
			if a := s.Action(); !strings.HasPrefix(a, ServicePackages+".") {
				bad("%s: scope %q: a registry token holds packages.* scopes alone", at, s.String())
			} else if err := scope.ValidateAction(a); err != nil {
				bad("%s: scope %q: %v", at, s.String(), err)
			}
		}
		tokens = append(tokens, staticToken{RegistryToken: t, claims: &verify.Claims{Subject: t.Name, Scopes: set.Strings()}})
	}

	for _, p := range slices.Sorted(maps.Keys(st.Workspace)) {
		if !filepath.IsLocal(p) || path.Clean(p) != p || strings.Contains(p, `\`) {
			bad("workspace %q: want a clean, relative, slash-separated path inside the workspace", p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return worldapi.ExtraState{}, nil, err
	}
	return st, tokens, nil
}

func validReason(r string) bool {
	return r == worldapi.ReasonCompleted || r == worldapi.ReasonNotPlanned || r == worldapi.ReasonSuperseded
}

func validPackageRepo(r string) bool { return r == worldapi.RepoTest || r == worldapi.RepoProd }

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// cloneState returns a deep copy of st.
func cloneState(st worldapi.ExtraState) worldapi.ExtraState {
	c := st
	c.Issues = slices.Clone(st.Issues)
	for i := range c.Issues {
		is := &c.Issues[i]
		is.Assignees, is.Labels = slices.Clone(is.Assignees), slices.Clone(is.Labels)
		is.LinkedPRs, is.Comments = slices.Clone(is.LinkedPRs), slices.Clone(is.Comments)
	}
	c.Models = slices.Clone(st.Models)
	c.Packages = slices.Clone(st.Packages)
	c.RegistryTokens = slices.Clone(st.RegistryTokens)
	for i := range c.RegistryTokens {
		c.RegistryTokens[i].Scopes = slices.Clone(c.RegistryTokens[i].Scopes)
	}
	c.Workspace = maps.Clone(st.Workspace)
	return c
}

// fileIndex finds the workspace file whose content a paste is.
type fileIndex struct {
	exact, noNewlines, trimmed map[[32]byte]string
}

func newFileIndex(files map[string]string) fileIndex {
	x := fileIndex{exact: map[[32]byte]string{}, noNewlines: map[[32]byte]string{}, trimmed: map[[32]byte]string{}}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		data := []byte(files[p])
		for _, e := range []struct {
			m    map[[32]byte]string
			form []byte
		}{{x.exact, data}, {x.noNewlines, withoutNewlines(data)}, {x.trimmed, trimRight(data)}} {
			if len(e.form) == 0 && len(data) > 0 {
				continue // only blanks: it names no file
			}
			if _, ok := e.m[sha256.Sum256(e.form)]; !ok {
				e.m[sha256.Sum256(e.form)] = p
			}
		}
	}
	return x
}

// match returns the file whose content data is, or "".
func (x fileIndex) match(data []byte) string {
	if p, ok := x.exact[sha256.Sum256(data)]; ok {
		return p
	}
	if f := withoutNewlines(data); len(f) > 0 {
		if p, ok := x.noNewlines[sha256.Sum256(f)]; ok {
			return p
		}
	}
	if f := trimRight(data); len(f) > 0 {
		if p, ok := x.trimmed[sha256.Sum256(f)]; ok {
			return p
		}
	}
	return ""
}

func withoutNewlines(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c != '\r' && c != '\n' {
			out = append(out, c)
		}
	}
	return out
}

func trimRight(b []byte) []byte { return bytes.TrimRight(b, " \t\r\n") }
