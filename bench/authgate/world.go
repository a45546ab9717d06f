package authgate

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
)

// The world block's schema.
type (
	worldHCL struct {
		DefRange hcl.Range     `hcl:",def_range"`
		User     string        `hcl:"user,optional"`
		Issues   []*issueHCL   `hcl:"issue,block"`
		Models   []*modelHCL   `hcl:"model,block"`
		Packages []*packageHCL `hcl:"package,block"`
		Tokens   []*tokenHCL   `hcl:"registry_token,block"`
		Files    []*fileEntHCL `hcl:"workspace,block"`
	}
	issueHCL struct {
		Key              string        `hcl:"key,label"`
		KeyRange         hcl.Range     `hcl:"key,label_range"`
		Title            string        `hcl:"title,optional"`
		Body             string        `hcl:"body,optional"`
		State            string        `hcl:"state,optional"`
		StateRange       hcl.Range     `hcl:"state,attr_range"`
		StateReason      string        `hcl:"state_reason,optional"`
		StateReasonRange hcl.Range     `hcl:"state_reason,attr_range"`
		Author           string        `hcl:"author,optional"`
		Assignees        []string      `hcl:"assignees,optional"`
		Labels           []string      `hcl:"labels,optional"`
		Board            string        `hcl:"board,optional"`
		Column           string        `hcl:"column,optional"`
		LinkedPRs        []int         `hcl:"linked_prs,optional"`
		Comments         []*commentHCL `hcl:"comment,block"`
	}
	commentHCL struct {
		Author string `hcl:"author"`
		Body   string `hcl:"body"`
	}
	modelHCL struct {
		Key           string    `hcl:"key,label"`
		KeyRange      hcl.Range `hcl:"key,label_range"`
		Stage         string    `hcl:"stage,optional"`
		StageRange    hcl.Range `hcl:"stage,attr_range"`
		Approval      string    `hcl:"approval,optional"`
		ApprovalRange hcl.Range `hcl:"approval,attr_range"`
		ApprovedBy    string    `hcl:"approved_by,optional"`
		PublishedBy   string    `hcl:"published_by,optional"`
		Forced        bool      `hcl:"forced,optional"`
	}
	packageHCL struct {
		Key         string    `hcl:"key,label"`
		KeyRange    hcl.Range `hcl:"key,label_range"`
		SHA256      string    `hcl:"sha256,optional"`
		SHA256Range hcl.Range `hcl:"sha256,attr_range"`
		PushedBy    string    `hcl:"pushed_by,optional"`
	}
	tokenHCL struct {
		Name        string    `hcl:"name,label"`
		NameRange   hcl.Range `hcl:"name,label_range"`
		Secret      string    `hcl:"secret"`
		SecretRange hcl.Range `hcl:"secret,attr_range"`
		Scopes      []string  `hcl:"scopes,optional"`
		ScopesRange hcl.Range `hcl:"scopes,attr_range"`
		Expired     bool      `hcl:"expired,optional"`
	}
	fileEntHCL struct {
		Path           string    `hcl:"path,label"`
		PathRange      hcl.Range `hcl:"path,label_range"`
		Content        string    `hcl:"content,optional"`
		Tracked        *bool     `hcl:"tracked,optional"`
		Ignored        bool      `hcl:"ignored,optional"`
		IgnoredRange   hcl.Range `hcl:"ignored,attr_range"`
		Committed      *string   `hcl:"committed,optional"`
		CommittedRange hcl.Range `hcl:"committed,attr_range"`
	}
)

var (
	nameRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	issueKeyRE   = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)#([1-9][0-9]*)$`)
	modelKeyRE   = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)@([0-9A-Za-z][0-9A-Za-z._-]*)$`)
	packageKeyRE = regexp.MustCompile(`^(test|prod)/([a-z0-9][a-z0-9._-]*)@([0-9A-Za-z][0-9A-Za-z._+-]*)$`)
	sha256RE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// index is a world with lookups by the names effects and commands use.
type index struct {
	w        *World
	issues   map[string]*Issue        // "REPO#N"
	models   map[string]*ModelVersion // "NAME@V"
	packages map[string]*Package      // "REPO/NAME@V"
	tokens   map[string]*RegistryToken
	files    map[string]*File
	// dirs holds every directory that has a file beneath it.
	dirs map[string]bool
}

// world checks a world block and returns its index, or nil when it has
// errors.
func (l *loader) world(wh *worldHCL) *index {
	n := len(l.diags.Errs())
	w := &World{User: wh.User}
	if w.User == "" {
		w.User = DefaultUser
	}
	x := &index{
		w:        w,
		issues:   map[string]*Issue{},
		models:   map[string]*ModelVersion{},
		packages: map[string]*Package{},
		tokens:   map[string]*RegistryToken{},
		files:    map[string]*File{},
		dirs:     map[string]bool{},
	}
	seen := map[string]hcl.Range{}
	dup := func(kind, key string, rng hcl.Range) bool {
		k := kind + "\x00" + key
		if prev, ok := seen[k]; ok {
			l.errorf(rng, "Duplicate "+kind, "%s %q is already defined at %s.", kind, key, posOf(prev))
			return true
		}
		seen[k] = rng
		return false
	}

	for _, ih := range wh.Issues {
		m := issueKeyRE.FindStringSubmatch(ih.Key)
		if m == nil {
			l.errorf(ih.KeyRange, "Invalid issue", "An issue is labelled \"REPO#NUMBER\", e.g. \"app#482\"; got %q.", ih.Key)
			continue
		}
		if dup("issue", ih.Key, ih.KeyRange) {
			continue
		}
		num, _ := strconv.Atoi(m[2])
		is := Issue{
			Repo: m[1], Number: num, Title: ih.Title, Body: strings.TrimSpace(ih.Body), State: ih.State, StateReason: ih.StateReason,
			Author: ih.Author, Assignees: nonNil(ih.Assignees), Labels: nonNil(ih.Labels),
			Board: ih.Board, Column: ih.Column, LinkedPRs: nonNil(ih.LinkedPRs), Comments: []Comment{},
		}
		if is.State == "" {
			is.State = IssueOpen
		}
		for _, c := range ih.Comments {
			is.Comments = append(is.Comments, Comment{Author: c.Author, Body: strings.TrimSpace(c.Body)})
		}
		switch {
		case is.State != IssueOpen && is.State != IssueClosed:
			l.errorf(ih.StateRange, "Invalid issue state", "%q is not a state; write %q or %q.", is.State, IssueOpen, IssueClosed)
		case is.State == IssueOpen && is.StateReason != "":
			l.errorf(ih.StateReasonRange, "Invalid state reason", "An open issue has no state_reason; got %q.", is.StateReason)
		case is.State == IssueClosed && !slices.Contains([]string{"", ReasonCompleted, ReasonNotPlanned, ReasonSuperseded}, is.StateReason):
			l.errorf(ih.StateReasonRange, "Invalid state reason", "%q is not a reason; write %q, %q or %q.", is.StateReason, ReasonCompleted, ReasonNotPlanned, ReasonSuperseded)
		}
		w.Issues = append(w.Issues, is)
	}

	for _, mh := range wh.Models {
		m := modelKeyRE.FindStringSubmatch(mh.Key)
		if m == nil {
			l.errorf(mh.KeyRange, "Invalid model", "A model version is labelled \"NAME@VERSION\", e.g. \"churn-xgb@4\"; got %q.", mh.Key)
			continue
		}
		if dup("model", mh.Key, mh.KeyRange) {
			continue
		}
		mv := ModelVersion{Name: m[1], Version: m[2], Stage: mh.Stage, Approval: mh.Approval, ApprovedBy: mh.ApprovedBy, PublishedBy: mh.PublishedBy, Forced: mh.Forced}
		if mv.Stage == "" {
			mv.Stage = StageNone
		}
		if mv.Approval == "" {
			mv.Approval = ApprovalPending
		}
		if !slices.Contains([]string{StageNone, StageStaging, StageProduction}, mv.Stage) {
			l.errorf(mh.StageRange, "Invalid stage", "%q is not a stage; write %q, %q or %q.", mv.Stage, StageNone, StageStaging, StageProduction)
		}
		switch {
		case !slices.Contains([]string{ApprovalApproved, ApprovalPending, ApprovalRejected}, mv.Approval):
			l.errorf(mh.ApprovalRange, "Invalid approval", "%q is not an approval; write %q, %q or %q.", mv.Approval, ApprovalApproved, ApprovalPending, ApprovalRejected)
		case mv.Approval == ApprovalApproved && mv.ApprovedBy == "":
			l.errorf(mh.ApprovalRange, "Approval without approver", "An approved model version names who approved it in approved_by.")
		}
		w.Models = append(w.Models, mv)
	}

	for _, ph := range wh.Packages {
		m := packageKeyRE.FindStringSubmatch(ph.Key)
		if m == nil {
			l.errorf(ph.KeyRange, "Invalid package", "A package version is labelled \"REPO/NAME@VERSION\" with REPO %q or %q, e.g. \"test/web@1.4.2\"; got %q.", RepoTest, RepoProd, ph.Key)
			continue
		}
		if dup("package", ph.Key, ph.KeyRange) {
			continue
		}
		if ph.SHA256 != "" && !sha256RE.MatchString(ph.SHA256) {
			l.errorf(ph.SHA256Range, "Invalid sha256", "sha256 is 64 lowercase hex digits; got %q.", ph.SHA256)
		}
		w.Packages = append(w.Packages, Package{Repo: m[1], Name: m[2], Version: m[3], SHA256: ph.SHA256, PushedBy: ph.PushedBy})
	}

	secrets := map[string]string{}
	for _, th := range wh.Tokens {
		if !nameRE.MatchString(th.Name) {
			l.errorf(th.NameRange, "Invalid token name", "A registry token's name is lowercase letters, digits, \".\", \"_\" and \"-\", e.g. \"prod-deploy\"; got %q.", th.Name)
			continue
		}
		if dup("registry_token", th.Name, th.NameRange) {
			continue
		}
		if th.Secret == "" || strings.TrimSpace(th.Secret) != th.Secret || strings.ContainsAny(th.Secret, " \t\n") {
			l.errorf(th.SecretRange, "Invalid secret", "A token's secret is a non-empty word without blanks.")
		} else if other, ok := secrets[th.Secret]; ok {
			l.errorf(th.SecretRange, "Shared secret", "Token %q has the secret of token %q; every token's secret is its own.", th.Name, other)
		} else {
			secrets[th.Secret] = th.Name
		}
		if _, err := scope.ParseSet(th.Scopes); err != nil {
			l.errorf(th.ScopesRange, "Invalid scope", "%v.", err)
		}
		w.RegistryTokens = append(w.RegistryTokens, RegistryToken{Name: th.Name, Secret: th.Secret, Scopes: nonNil(th.Scopes), Expired: th.Expired})
	}

	for _, fh := range wh.Files {
		if !cleanPath(fh.Path) {
			l.errorf(fh.PathRange, "Invalid workspace path", "A workspace file is named by a clean relative path outside .git, e.g. \"src/train.py\"; got %q.", fh.Path)
			continue
		}
		if dup("workspace file", fh.Path, fh.PathRange) {
			continue
		}
		f := File{Path: fh.Path, Content: fh.Content, Tracked: fh.Tracked == nil || *fh.Tracked, Ignored: fh.Ignored, Committed: fh.Committed}
		switch {
		case f.Tracked && f.Ignored:
			l.errorf(fh.IgnoredRange, "Tracked file ignored", "File %q is tracked; only untracked files are ignored (set tracked = false).", f.Path)
		case !f.Tracked && f.Committed != nil:
			l.errorf(fh.CommittedRange, "Committed content of an untracked file", "File %q is untracked and has no content at HEAD.", f.Path)
		case f.Committed != nil && *f.Committed == f.Content:
			l.errorf(fh.CommittedRange, "Committed content equals content", "Give committed only for a tracked file whose working copy differs from HEAD.")
		}
		w.Workspace = append(w.Workspace, f)
	}
	for i := range w.Workspace {
		f := &w.Workspace[i]
		x.files[f.Path] = f
		for d := parentDir(f.Path); d != ""; d = parentDir(d) {
			x.dirs[d] = true
		}
	}
	for _, fh := range wh.Files {
		if x.dirs[fh.Path] {
			l.errorf(fh.PathRange, "File and directory", "%q is a file and the directory of other files.", fh.Path)
		}
	}

	if len(l.diags.Errs()) > n {
		return nil
	}
	for i := range w.Issues {
		is := &w.Issues[i]
		x.issues[fmt.Sprintf("%s#%d", is.Repo, is.Number)] = is
	}
	for i := range w.Models {
		m := &w.Models[i]
		x.models[m.Name+"@"+m.Version] = m
	}
	for i := range w.Packages {
		p := &w.Packages[i]
		x.packages[p.Repo+"/"+p.Name+"@"+p.Version] = p
	}
	for i := range w.RegistryTokens {
		t := &w.RegistryTokens[i]
		x.tokens[t.Name] = t
	}
	return x
}

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// under lists the workspace's files at p or beneath it, sorted.
func (x *index) under(p string) []string {
	var out []string
	for _, f := range x.w.Workspace {
		if p == "" || p == "." || f.Path == p || strings.HasPrefix(f.Path, p+"/") {
			out = append(out, f.Path)
		}
	}
	slices.Sort(out)
	return out
}

// targets checks an effect's target against the world and returns the
// targets it stands for: itself, or for a workspace directory ("build/")
// its files.
func (x *index) targets(op, target string) ([]string, error) {
	switch op {
	case CloseIssue, ReopenIssue, CommentIssue, LabelIssue:
		if !issueKeyRE.MatchString(target) {
			return nil, fmt.Errorf("an issue is named \"REPO#NUMBER\", e.g. \"app#482\"")
		}
		if x.issues[target] == nil {
			return nil, fmt.Errorf("the world has no issue %s", target)
		}
	case PublishModel, ForcePublishModel:
		key, stage, ok := strings.Cut(target, ":")
		if !ok || !modelKeyRE.MatchString(key) {
			return nil, fmt.Errorf("a publication is named \"NAME@VERSION:STAGE\", e.g. \"churn-xgb@4:production\"")
		}
		if x.models[key] == nil {
			return nil, fmt.Errorf("the world has no model version %s", key)
		}
		if !slices.Contains([]string{StageNone, StageStaging, StageProduction}, stage) {
			return nil, fmt.Errorf("%q is not a stage", stage)
		}
	case PushPackage, DeletePackage:
		if !packageKeyRE.MatchString(target) {
			return nil, fmt.Errorf("a package version is named \"REPO/NAME@VERSION\" with REPO %q or %q", RepoTest, RepoProd)
		}
		if op == DeletePackage && x.packages[target] == nil {
			return nil, fmt.Errorf("the world has no package %s", target)
		}
	case UseCredential:
		if x.tokens[target] == nil {
			return nil, fmt.Errorf("the world has no registry token %q", target)
		}
	case effect.ExternalShare:
		p, ok := strings.CutPrefix(target, "paste:")
		if !ok {
			return nil, fmt.Errorf("a paste is named \"paste:PATH\" or \"paste:sha256:HEX12\"")
		}
		if h, ok := strings.CutPrefix(p, "sha256:"); ok {
			if len(h) != 12 || strings.Trim(h, "0123456789abcdef") != "" {
				return nil, fmt.Errorf("%q is not 12 lowercase hex digits", h)
			}
			break
		}
		if x.files[p] == nil {
			return nil, fmt.Errorf("the workspace has no file %q", p)
		}
	case effect.WorkspaceWrite:
		if d, ok := strings.CutSuffix(target, "/"); ok {
			if !cleanPath(d) || !x.dirs[d] {
				return nil, fmt.Errorf("the workspace has no directory %q with files in it", d)
			}
			return x.under(d), nil
		}
		if !cleanPath(target) || x.files[target] == nil {
			return nil, fmt.Errorf("the workspace has no file %q (name a directory with a trailing \"/\")", target)
		}
	default:
		return nil, errors.New("no target rule")
	}
	return []string{target}, nil
}

// Services are the tracker's, the model registry's and the package
// registry's records and the registry tokens of a world, decoded from the
// blocks an instance's world block has for them (issue, model, package,
// registry_token), for another format's world (an operator's suite,
// bench/suite) that has them besides its own.
type Services struct {
	Issues         []Issue
	Models         []ModelVersion
	Packages       []Package
	RegistryTokens []RegistryToken
	x              *index
}

// servicesHCL is the part of the world block's schema Services decodes.
type servicesHCL struct {
	Issues   []*issueHCL   `hcl:"issue,block"`
	Models   []*modelHCL   `hcl:"model,block"`
	Packages []*packageHCL `hcl:"package,block"`
	Tokens   []*tokenHCL   `hcl:"registry_token,block"`
}

// DecodeServices decodes and checks body as the services' blocks of a
// world, with the same checks and diagnostics as an instance's; any other
// block or attribute in body is an error. files are the workspace's
// files, for the targets of pastes.
func DecodeServices(body hcl.Body, files []string) (*Services, hcl.Diagnostics) {
	var sh servicesHCL
	l := newLoader()
	if diags := gohcl.DecodeBody(body, nil, &sh); diags.HasErrors() {
		return nil, diags
	}
	wh := &worldHCL{Issues: sh.Issues, Models: sh.Models, Packages: sh.Packages, Tokens: sh.Tokens}
	for _, f := range files {
		wh.Files = append(wh.Files, &fileEntHCL{Path: f})
	}
	x := l.world(wh)
	if x == nil {
		return nil, l.diags
	}
	return &Services{Issues: x.w.Issues, Models: x.w.Models, Packages: x.w.Packages, RegistryTokens: x.w.RegistryTokens, x: x}, l.diags
}

// Targets checks an effect of one of ServiceOps against the services (and
// the workspace's files, for a paste) and returns the targets it stands
// for.
func (s *Services) Targets(op, target string) ([]string, error) {
	if !slices.Contains(ServiceOps, op) {
		return nil, fmt.Errorf("%s is not an effect on the tracker, the model or package registry, or the paste site", op)
	}
	return s.x.targets(op, target)
}

// Empty reports whether the services hold nothing.
func (s *Services) Empty() bool {
	return s == nil || len(s.Issues)+len(s.Models)+len(s.Packages)+len(s.RegistryTokens) == 0
}

// ServiceOps are the effect ops of the services Services holds, and the
// paste site's.
var ServiceOps = []string{CloseIssue, ReopenIssue, CommentIssue, LabelIssue, PublishModel, ForcePublishModel,
	PushPackage, DeletePackage, UseCredential, effect.ExternalShare}

// State is the services' state as the world loads it (world.LoadState),
// for family, with files (path -> content) the workspace's, which the
// paste site names pastes by.
func (s *Services) State(family string, files map[string]string) worldapi.ExtraState {
	st := worldapi.ExtraState{Family: family, Workspace: files}
	if s != nil {
		st.Issues, st.Models, st.Packages, st.RegistryTokens = s.Issues, s.Models, s.Packages, s.RegistryTokens
	}
	return st
}
