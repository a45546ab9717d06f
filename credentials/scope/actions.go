package scope

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ActionInfo documents an action: what it does and which request attributes
// a service passes when it checks it. The keys are a contract between
// manifests and services: a scope that selects on a key the service never
// passes allows nothing.
type ActionInfo struct {
	Summary string
	Keys    []string
}

// KnownActions are the actions that manifests may name. Services check
// requests against exactly these names and pass the listed attributes.
var KnownActions = map[string]ActionInfo{
	"git.fetch":      {Summary: "clone or fetch a repository", Keys: []string{"repo"}},
	"git.push":       {Summary: "create or update a ref", Keys: []string{"repo", "ref"}},
	"git.delete_ref": {Summary: "delete a ref (branch or tag)", Keys: []string{"repo", "ref"}},

	"jobs.list":   {Summary: "list jobs", Keys: []string{"owner", "queue"}},
	"jobs.cancel": {Summary: "cancel a job", Keys: []string{"id", "name", "owner", "queue"}},
	"jobs.update": {Summary: "change a job's attributes", Keys: []string{"id", "name", "owner", "queue"}},

	"services.list":    {Summary: "list services", Keys: []string{"namespace"}},
	"services.restart": {Summary: "restart a service", Keys: []string{"namespace", "name"}},
	"services.scale":   {Summary: "change a service's replica count", Keys: []string{"namespace", "name"}},
	"services.delete":  {Summary: "delete a service", Keys: []string{"namespace", "name"}},

	"objects.list":   {Summary: "list objects", Keys: []string{"bucket", "prefix"}},
	"objects.get":    {Summary: "read an object", Keys: []string{"bucket", "key"}},
	"objects.put":    {Summary: "write an object", Keys: []string{"bucket", "key"}},
	"objects.delete": {Summary: "delete an object", Keys: []string{"bucket", "key"}},

	"packages.publish": {Summary: "publish a package version", Keys: []string{"name", "version"}},
	"packages.list":    {Summary: "list a repository's packages", Keys: []string{"repo"}},
	"packages.push":    {Summary: "push a package version", Keys: []string{"repo", "name", "version"}},
	"packages.delete":  {Summary: "delete a package version", Keys: []string{"repo", "name", "version"}},

	"tracker.list":    {Summary: "list or read a repository's issues", Keys: []string{"repo"}},
	"tracker.close":   {Summary: "close an issue", Keys: []string{"repo", "issue"}},
	"tracker.reopen":  {Summary: "reopen an issue", Keys: []string{"repo", "issue"}},
	"tracker.comment": {Summary: "comment on an issue", Keys: []string{"repo", "issue"}},
	"tracker.label":   {Summary: "add or remove an issue's labels", Keys: []string{"repo", "issue"}},

	"models.list":    {Summary: "list or read model versions", Keys: []string{"name", "version"}},
	"models.publish": {Summary: "publish a model version to a stage", Keys: []string{"name", "version", "stage", "force"}},

	"issues.create":  {Summary: "open an issue", Keys: []string{"project"}},
	"issues.comment": {Summary: "comment on an issue", Keys: []string{"project", "issue"}},

	"paste.create": {Summary: "create a paste", Keys: []string{"visibility"}},
}

// ErrUnknownAction is wrapped by ValidateAction's error for a well-formed
// action that is not in KnownActions.
var ErrUnknownAction = errors.New("unknown action")

// ValidateAction reports an error unless action is a known action or
// "service.*" for a service that has known actions.
func ValidateAction(action string) error {
	if err := checkAction(action, true); err != nil {
		return err
	}
	if svc, ok := strings.CutSuffix(action, ".*"); ok {
		for a := range KnownActions {
			if strings.HasPrefix(a, svc+".") {
				return nil
			}
		}
		return fmt.Errorf("%w %q: no service %q (known services: %s)", ErrUnknownAction, action, svc, strings.Join(knownServices(), ", "))
	}
	if _, ok := KnownActions[action]; ok {
		return nil
	}
	if sugg := suggest(action); len(sugg) > 0 {
		return fmt.Errorf("%w %q (did you mean %s?)", ErrUnknownAction, action, strings.Join(sugg, " or "))
	}
	return fmt.Errorf("%w %q", ErrUnknownAction, action)
}

// UnknownKeys returns the selector keys of s that no action s covers
// documents, sorted. A scope with such a key allows nothing, so a manifest
// validator reports them. It returns nil for an action ValidateAction rejects.
func UnknownKeys(s Scope) []string {
	if ValidateAction(s.action) != nil {
		return nil
	}
	known := map[string]bool{}
	svc, all := strings.CutSuffix(s.action, ".*")
	for a, info := range KnownActions {
		if a == s.action || all && strings.HasPrefix(a, svc+".") {
			for _, k := range info.Keys {
				known[k] = true
			}
		}
	}
	var out []string
	for _, sel := range s.sels {
		if !known[sel.key] {
			out = append(out, sel.key)
		}
	}
	return out
}

func knownServices() []string {
	var out []string
	for a := range KnownActions {
		svc, _, _ := strings.Cut(a, ".")
		if !slices.Contains(out, svc) {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out
}

// suggest returns known actions with the same verb or the same service as
// action, for an error message.
func suggest(action string) []string {
	svc, verb, _ := strings.Cut(action, ".")
	var out []string
	for a := range KnownActions {
		s, v, _ := strings.Cut(a, ".")
		if v == verb || (s == svc && strings.HasPrefix(v, verb[:min(len(verb), 3)])) {
			out = append(out, fmt.Sprintf("%q", a))
		}
	}
	slices.Sort(out)
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}
