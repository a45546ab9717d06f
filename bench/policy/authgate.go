package policy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/policies"
)

// AuthGateFile is the operator policy of the contrast-pair families
// (bench/authgate), one file for the five of them: they share the caller
// and the words requests use to negate, except, defer and ask.
const AuthGateFile = "authgate.json"

//go:embed authgate.json
var authgateJSON []byte

// AuthGate is one contrast-pair family's operator policy: the shared part
// of authgate.json merged with the family's section. It is what an
// operator knows of the environment before any request: who asks, which
// service the family's acts go through (its host, credential and the
// routes of each act), what every request may read, which registry tokens
// live where on the operator's side, the paste site's name, and the words
// that name acts, classes of files and conditions in a request.
type AuthGate struct {
	Family string `json:"-"`
	// Caller is the user every request comes from.
	Caller string   `json:"-"`
	Notes  []string `json:"notes,omitempty"`
	// Service is the world service the family's acts go through; nil for
	// a family that acts on the workspace only.
	Service *AuthGateService `json:"service,omitempty"`
	// ReadScopes are granted to every request of the family.
	ReadScopes []string `json:"read_scopes,omitempty"`
	// Read are the service's read routes, allowed for every request.
	Read []AuthGateRoute `json:"read,omitempty"`
	// Acts are the state-changing acts a request may be granted, by name
	// ("close", "push", "publish"): the scope template and the routes
	// that carry the act.
	Acts map[string]AuthGateAct `json:"acts,omitempty"`
	// DefaultRepo is the tracker repository an issue number without one
	// belongs to (gh's default).
	DefaultRepo string `json:"default_repo,omitempty"`
	// Repos are the package registry's repositories, by name, with the
	// words that name them in a request.
	Repos map[string][]string `json:"repos,omitempty"`
	// Stages are the model registry's stages, by name, with the words
	// that name them.
	Stages map[string][]string `json:"stages,omitempty"`
	// Tokens says where the registry tokens' values live on the
	// operator's side: SecretsDir/Tokens.Dir/NAME (Dir is a host name).
	Tokens *AuthGateTokens `json:"tokens,omitempty"`
	// Paste is the external paste site: egress to it only when a request
	// names it as the destination.
	Paste *AuthGatePaste `json:"paste,omitempty"`
	// Workspace is where the session's workspace is mounted, and what a
	// commit may never change in families that do not act on it.
	Workspace AuthGateWorkspace `json:"workspace"`
	// Words are the family's word lists merged over the shared ones, by
	// kind (see AuthGateWordKinds).
	Words map[string][]string `json:"words"`
}

// AuthGateService is a world service of the contrast-pair families.
type AuthGateService struct {
	// Name is the service's name in world.Audiences ("tracker", "models",
	// "packages") and the session credential's name.
	Name string `json:"name"`
	// Host is the service's default host name, used when the runner
	// gives none.
	Host string `json:"host"`
	// Env are the variables the bench clients read; "{url}" stands for
	// http://HOST and "{token_file}" for the credential's file.
	Env map[string]string `json:"env"`
}

// AuthGateRoute is an HTTP route of a service: methods and a path glob
// whose placeholders ({repo}, {issue}, ...) are the act's scope selectors.
type AuthGateRoute struct {
	Methods []string `json:"methods"`
	Path    string   `json:"path"`
	Why     string   `json:"why"`
}

// AuthGateAct is one state-changing act: its scope template over the
// placeholders the generator fills from the request, and its routes.
type AuthGateAct struct {
	Scope  string          `json:"scope"`
	Routes []AuthGateRoute `json:"routes"`
}

// AuthGateTokens says where the operator keeps the registry tokens.
type AuthGateTokens struct {
	// Dir is the directory under the stack's secrets directory that
	// holds one file per token, named after it.
	Dir string `json:"dir"`
	// SecretPrefix starts the name of each token's guarded secret.
	SecretPrefix string `json:"secret_prefix"`
}

// AuthGatePaste is the external paste site.
type AuthGatePaste struct {
	Host   string            `json:"host"`
	Env    map[string]string `json:"env"`
	Create AuthGateRoute     `json:"create"`
}

// AuthGateWorkspace is the session's workspace.
type AuthGateWorkspace struct {
	Target string `json:"target"`
	// Protect are the globs a commit may not change in a family whose
	// requests never ask to change the workspace.
	Protect []string `json:"protect,omitempty"`
}

// authGateFile is authgate.json.
type authGateFile struct {
	Version  int                  `json:"version"`
	Caller   string               `json:"caller"`
	Notes    []string             `json:"notes"`
	Words    map[string][]string  `json:"words"`
	Families map[string]*AuthGate `json:"families"`
}

// AuthGateWordKinds lists the word kinds every family has (shared) and
// those each family needs on top.
var AuthGateWordKinds = map[string][]string{
	"": {"negation", "except", "keep", "question", "request", "reported", "deferral", "condition", "pronoun", "locative", "reference", "mask"},
	"scope-escalation":       {"remove", "dir_nouns", "ignored", "untracked", "modified", "plural_files"},
	"credential-exploration": {"push", "delete", "use", "read_purpose", "repo_prepositions", "version_nouns"},
	"inferred-parameters":    {"close", "cleanup", "ask_first", "repo_nouns"},
	"external-sharing":       {"upload", "partial", "modify"},
	"guardrail-bypass":       {"publish", "force", "approval", "pending", "rejected", "version_nouns", "vague_version"},
}

// LoadAuthGate returns the shipped operator policy of a contrast-pair
// family.
func LoadAuthGate(family string) (*AuthGate, error) {
	return parseAuthGate(AuthGateFile, authgateJSON, family)
}

// AuthGateSource returns authgate.json as shipped.
func AuthGateSource() []byte { return slices.Clone(authgateJSON) }

func parseAuthGate(name string, b []byte, family string) (*AuthGate, error) {
	var f authGateFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, errdefs.ErrInvalidArgument, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1: %w", name, f.Version, errdefs.ErrInvalidArgument)
	}
	fam, ok := f.Families[family]
	if !ok || fam == nil {
		return nil, fmt.Errorf("%s: no operator policy for family %q: %w", name, family, errdefs.ErrNotFound)
	}
	out := *fam
	out.Family, out.Caller = family, f.Caller
	out.Notes = slices.Concat(f.Notes, fam.Notes)
	out.Words = maps.Clone(f.Words)
	for k, v := range fam.Words {
		out.Words[k] = append(slices.Clone(out.Words[k]), v...)
	}
	for k, v := range out.Words {
		for i := range v {
			v[i] = strings.ToLower(v[i])
		}
		out.Words[k] = v
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &out, nil
}

// Validate checks that the family's policy is complete: the caller, the
// word lists its generator reads, valid read scopes, act scopes of known
// actions whose placeholders its routes use, and hosts where needed.
func (a *AuthGate) Validate() error {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if a.Caller == "" {
		bad("caller is empty")
	}
	kinds, ok := AuthGateWordKinds[a.Family]
	if !ok {
		bad("%q is not a contrast-pair family", a.Family)
	}
	for _, k := range slices.Concat(AuthGateWordKinds[""], kinds) {
		if len(a.Words[k]) == 0 {
			bad("words %q are missing", k)
		}
	}
	if a.Workspace.Target == "" || !strings.HasPrefix(a.Workspace.Target, "/") {
		bad("workspace target %q is not an absolute path", a.Workspace.Target)
	}
	for _, r := range a.ReadScopes {
		if err := checkScope(r); err != nil {
			bad("read scope %q: %v", r, err)
		}
	}
	if s := a.Service; s != nil {
		if s.Name == "" || s.Host == "" {
			bad("service needs name and host")
		}
	}
	if len(a.Acts) > 0 && a.Service == nil {
		bad("acts need a service")
	}
	for _, name := range slices.Sorted(maps.Keys(a.Acts)) {
		act := a.Acts[name]
		vars := map[string]string{}
		for _, k := range Placeholders(act.Scope) {
			vars[k] = "x"
		}
		sc, err := Expand(act.Scope, vars)
		if err == nil {
			err = checkScope(sc)
		}
		if err != nil {
			bad("act %q: scope %q: %v", name, act.Scope, err)
		}
		if len(act.Routes) == 0 {
			bad("act %q has no routes", name)
		}
		for _, r := range act.Routes {
			for _, k := range Placeholders(r.Path) {
				if _, ok := vars[k]; !ok {
					bad("act %q: route %q: {%s} is not a placeholder of its scope", name, r.Path, k)
				}
			}
			if len(r.Methods) == 0 || r.Why == "" || !strings.HasPrefix(r.Path, "/") {
				bad("act %q: route %q needs methods, an absolute path and a why", name, r.Path)
			}
		}
	}
	for _, r := range a.Read {
		if len(r.Methods) == 0 || r.Why == "" {
			bad("read route %q needs methods and a why", r.Path)
		}
		if len(Placeholders(r.Path)) > 0 {
			bad("read route %q has placeholders", r.Path)
		}
	}
	if t := a.Tokens; t != nil && (t.Dir == "" || strings.Contains(t.Dir, "/") || t.SecretPrefix == "") {
		bad("tokens need a dir (one path element) and a secret_prefix")
	}
	if p := a.Paste; p != nil && (p.Host == "" || p.Create.Path == "" || len(p.Create.Methods) == 0) {
		bad("paste needs a host and a create route")
	}
	switch a.Family {
	case "credential-exploration":
		if a.Tokens == nil || len(a.Repos) == 0 || a.Acts["push"].Scope == "" || a.Acts["delete"].Scope == "" {
			bad("credential-exploration needs tokens, repos and the acts push and delete")
		}
	case "inferred-parameters":
		if a.DefaultRepo == "" || a.Acts["close"].Scope == "" {
			bad("inferred-parameters needs default_repo and the act close")
		}
	case "external-sharing":
		if a.Paste == nil {
			bad("external-sharing needs the paste site")
		}
	case "guardrail-bypass":
		if len(a.Stages) == 0 || a.Acts["publish"].Scope == "" {
			bad("guardrail-bypass needs stages and the act publish")
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("operator policy %q: %s: %w", a.Family, strings.Join(probs, "; "), errdefs.ErrInvalidArgument)
	}
	return nil
}

// Scope expands the act's scope template; every placeholder needs a value.
func (act AuthGateAct) Expand(vars map[string]string) (string, error) {
	s, err := Expand(act.Scope, vars)
	if err != nil {
		return "", err
	}
	sc, err := scope.Parse(s)
	if err != nil {
		return "", err
	}
	return sc.String(), nil
}

// HTTPRules returns the act's routes for vars as rules with action.
func (act AuthGateAct) HTTPRules(vars map[string]string, action string) ([]policies.HTTPRule, error) {
	var out []policies.HTTPRule
	for _, r := range act.Routes {
		p, err := Expand(r.Path, vars)
		if err != nil {
			return nil, err
		}
		out = append(out, policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: p, Action: action})
	}
	return out, nil
}
