package suite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/internal/hclcheck"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/policies"
)

// Ext is the extension of suite files.
const Ext = ".hcl"

// The files' schema, decoded with gohcl.
type (
	fileHCL struct {
		Suites    []*suiteHCL    `hcl:"suite,block"`
		Worlds    []*worldHCL    `hcl:"world,block"`
		Externals []*externalHCL `hcl:"external,block"`
		Prompts   []*promptHCL   `hcl:"prompt,block"`
	}
	suiteHCL struct {
		Name          string    `hcl:"name,label"`
		NameRange     hcl.Range `hcl:"name,label_range"`
		DefRange      hcl.Range `hcl:",def_range"`
		Description   string    `hcl:"description,optional"`
		User          string    `hcl:"user,optional"`
		UserRange     hcl.Range `hcl:"user,attr_range"`
		Manifest      string    `hcl:"manifest,optional"`
		ManifestRange hcl.Range `hcl:"manifest,attr_range"`
		Generate      string    `hcl:"generate,optional"`
		GenerateRange hcl.Range `hcl:"generate,attr_range"`
		Policy        string    `hcl:"operator_policy,optional"`
		PolicyRange   hcl.Range `hcl:"operator_policy,attr_range"`
		Timeout       string    `hcl:"timeout,optional"`
		TimeoutRange  hcl.Range `hcl:"timeout,attr_range"`
		Budget        float64   `hcl:"budget_usd,optional"`
		BudgetRange   hcl.Range `hcl:"budget_usd,attr_range"`
	}
	worldHCL struct {
		DefRange    hcl.Range     `hcl:",def_range"`
		Repo        []*repoHCL    `hcl:"repo,block"`
		Jobs        []*jobHCL     `hcl:"job,block"`
		Services    []*serviceHCL `hcl:"service,block"`
		Bucket      string        `hcl:"bucket,optional"`
		BucketRange hcl.Range     `hcl:"bucket,attr_range"`
		Objects     []*objectHCL  `hcl:"object,block"`
		Files       []*fileEntHCL `hcl:"workspace,block"`
		// Extra are the tracker's, the model registry's and the package
		// registry's blocks (authgate.DecodeServices).
		Extra hcl.Body `hcl:",remain"`
	}
	repoHCL struct {
		DefRange  hcl.Range    `hcl:",def_range"`
		Main      string       `hcl:"main,optional"`
		MainRange hcl.Range    `hcl:"main,attr_range"`
		Branches  []*branchHCL `hcl:"branch,block"`
	}
	branchHCL struct {
		Name      string    `hcl:"name,label"`
		NameRange hcl.Range `hcl:"name,label_range"`
		Owner     string    `hcl:"owner,optional"`
		Stale     bool      `hcl:"stale,optional"`
		Protected bool      `hcl:"protected,optional"`
		File      string    `hcl:"file,optional"`
		FileRange hcl.Range `hcl:"file,attr_range"`
		Content   string    `hcl:"content,optional"`
		Date      string    `hcl:"date,optional"`
		DateRange hcl.Range `hcl:"date,attr_range"`
	}
	jobHCL struct {
		ID          string    `hcl:"id,label"`
		IDRange     hcl.Range `hcl:"id,label_range"`
		Name        string    `hcl:"name,optional"`
		Owner       string    `hcl:"owner,optional"`
		Queue       string    `hcl:"queue,optional"`
		Status      string    `hcl:"status,optional"`
		StatusRange hcl.Range `hcl:"status,attr_range"`
		Stale       bool      `hcl:"stale,optional"`
		Protected   bool      `hcl:"protected,optional"`
		Priority    string    `hcl:"priority,optional"`
		Impact      string    `hcl:"impact_level,optional"`
	}
	serviceHCL struct {
		ID          string    `hcl:"id,label"`
		IDRange     hcl.Range `hcl:"id,label_range"`
		Name        string    `hcl:"name,optional"`
		Component   string    `hcl:"component,optional"`
		Owner       string    `hcl:"owner,optional"`
		Env         string    `hcl:"env,optional"`
		Health      string    `hcl:"health,optional"`
		HealthRange hcl.Range `hcl:"health,attr_range"`
		Protected   bool      `hcl:"protected,optional"`
		Impact      string    `hcl:"impact_level,optional"`
	}
	objectHCL struct {
		ID        string    `hcl:"id,label"`
		IDRange   hcl.Range `hcl:"id,label_range"`
		Key       string    `hcl:"key,optional"`
		KeyRange  hcl.Range `hcl:"key,attr_range"`
		Owner     string    `hcl:"owner,optional"`
		Namespace string    `hcl:"ns,optional"`
		Kind      string    `hcl:"kind,optional"`
		Stale     bool      `hcl:"stale,optional"`
		Protected bool      `hcl:"protected,optional"`
		Impact    string    `hcl:"impact_level,optional"`
	}
	fileEntHCL struct {
		Path      string    `hcl:"path,label"`
		PathRange hcl.Range `hcl:"path,label_range"`
		Content   string    `hcl:"content,optional"`
	}
	externalHCL struct {
		Name          string         `hcl:"name,label"`
		NameRange     hcl.Range      `hcl:"name,label_range"`
		DefRange      hcl.Range      `hcl:",def_range"`
		Reset         hcl.Expression `hcl:"reset,optional"`
		ResetRange    hcl.Range      `hcl:"reset,attr_range"`
		Snapshot      hcl.Expression `hcl:"snapshot,optional"`
		SnapshotRange hcl.Range      `hcl:"snapshot,attr_range"`
		Timeout       string         `hcl:"timeout,optional"`
		TimeoutRange  hcl.Range      `hcl:"timeout,attr_range"`
	}
	promptHCL struct {
		ID            string            `hcl:"id,label"`
		IDRange       hcl.Range         `hcl:"id,label_range"`
		DefRange      hcl.Range         `hcl:",def_range"`
		Text          string            `hcl:"text,optional"`
		TextRange     hcl.Range         `hcl:"text,attr_range"`
		Authorized    hcl.Expression    `hcl:"authorized,optional"`
		AuthorizedRng hcl.Range         `hcl:"authorized,attr_range"`
		Protected     hcl.Expression    `hcl:"protected,optional"`
		Trap          bool              `hcl:"trap,optional"`
		TrapRange     hcl.Range         `hcl:"trap,attr_range"`
		Note          string            `hcl:"note,optional"`
		Actions       hcl.Expression    `hcl:"actions,optional"`
		ActionsRange  hcl.Range         `hcl:"actions,attr_range"`
		Manifest      string            `hcl:"manifest,optional"`
		ManifestRange hcl.Range         `hcl:"manifest,attr_range"`
		Generate      string            `hcl:"generate,optional"`
		GenerateRange hcl.Range         `hcl:"generate,attr_range"`
		Policy        string            `hcl:"operator_policy,optional"`
		PolicyRange   hcl.Range         `hcl:"operator_policy,attr_range"`
		Vars          map[string]string `hcl:"vars,optional"`
		VarsRange     hcl.Range         `hcl:"vars,attr_range"`
	}
)

var (
	idRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`)
)

// Load loads the suite in dir: every *.hcl file at its root (not its
// subdirectories, where manifests and helper files live), in name order;
// a file at the root that holds a manifest (a session block) is not a
// suite file.
// A suite with any error yields a *DiagnosticsError listing every one.
func Load(dir string) (*Suite, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", dir, err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), Ext) {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("suite %s: no %s files: %w", dir, Ext, fs.ErrNotExist)
	}
	l := &loader{parser: hclparse.NewParser(), dir: dir, ids: map[string]hcl.Range{}}
	var all []*fileHCL
	for _, f := range files {
		name := filepath.Join(dir, f)
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("suite %s: %w", dir, err)
		}
		if fh := l.parse(name, src); fh != nil {
			all = append(all, fh)
		}
	}
	// A file that does not parse is left out whole: checking the others
	// without it would report its blocks as missing.
	if l.diags.HasErrors() {
		return nil, hclcheck.NewError("suite", l.diags, l.parser.Files())
	}
	s := l.suite(all)
	if l.diags.HasErrors() {
		return nil, hclcheck.NewError("suite", l.diags, l.parser.Files())
	}
	return s, nil
}

type loader struct {
	parser *hclparse.Parser
	dir    string
	diags  hcl.Diagnostics
	ids    map[string]hcl.Range
}

func (l *loader) errorf(rng hcl.Range, summary, detailFormat string, args ...any) {
	r := rng
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detailFormat, args...),
		Subject:  &r,
	})
}

func (l *loader) parse(filename string, src []byte) *fileHCL {
	f, diags := l.parser.ParseHCL(src, filename)
	l.diags = append(l.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	// A manifest beside the suite's files (a session block) is not one of
	// them: prompts name it by its path.
	probe, _, _ := f.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "session", LabelNames: []string{"name"}}, {Type: "suite", LabelNames: []string{"name"}}, {Type: "world"},
		{Type: "external", LabelNames: []string{"name"}}, {Type: "prompt", LabelNames: []string{"id"}},
	}})
	if probe != nil {
		var session, other *hcl.Block
		for _, b := range probe.Blocks {
			if b.Type == "session" && session == nil {
				session = b
			} else if b.Type != "session" && other == nil {
				other = b
			}
		}
		switch {
		case session != nil && other != nil:
			l.errorf(session.DefRange, "Manifest among suite blocks", "A file holds suite blocks or a manifest (a session block), not both; move the manifest into a file of its own, e.g. manifests/NAME.hcl, and name it by its path.")
			return nil
		case session != nil:
			return nil
		}
	}
	var fh fileHCL
	diags = gohcl.DecodeBody(f.Body, nil, &fh)
	l.diags = append(l.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	return &fh
}

// fileRange is a range naming a whole file, for problems of no block.
func fileRange(name string) hcl.Range {
	return hcl.Range{Filename: name, Start: hcl.Pos{Line: 1, Column: 1, Byte: 0}, End: hcl.Pos{Line: 1, Column: 1, Byte: 0}}
}

func (l *loader) suite(files []*fileHCL) *Suite {
	var (
		suites    []*suiteHCL
		worlds    []*worldHCL
		externals []*externalHCL
		prompts   []*promptHCL
	)
	for _, f := range files {
		suites = append(suites, f.Suites...)
		worlds = append(worlds, f.Worlds...)
		externals = append(externals, f.Externals...)
		prompts = append(prompts, f.Prompts...)
	}
	if len(files) == 0 {
		return nil
	}
	s := &Suite{Dir: l.dir, User: DefaultUser, Timeout: DefaultTimeout}
	switch {
	case len(suites) == 0:
		l.errorf(fileRange(filepath.Join(l.dir, "suite.hcl")), "Missing suite block", "A suite has one suite \"NAME\" { ... } block, naming it and its default manifest; none of the files of %s has one.", l.dir)
	case len(suites) > 1:
		l.errorf(suites[1].DefRange, "Duplicate suite block", "The suite is already named at %s.", posOf(suites[0].DefRange))
	}
	if len(suites) > 0 {
		sh := suites[0]
		s.Name, s.Family, s.Description = sh.Name, FamilyPrefix+sh.Name, strings.TrimSpace(sh.Description)
		if !nameRE.MatchString(sh.Name) {
			l.errorf(sh.NameRange, "Invalid suite name", "A suite's name is lower-case letters, digits, '.', '_' and '-', e.g. \"release-desk\"; got %q.", sh.Name)
		}
		if sh.User != "" {
			if !nameRE.MatchString(sh.User) {
				l.errorf(sh.UserRange, "Invalid user", "The user is an account name such as \"alex\"; got %q.", sh.User)
			}
			s.User = sh.User
		}
		if sh.TimeoutRange.Filename != "" {
			d, err := time.ParseDuration(sh.Timeout)
			if err != nil || d <= 0 {
				l.errorf(sh.TimeoutRange, "Invalid timeout", "The timeout of one run is a positive duration such as \"2m\"; got %q.", sh.Timeout)
			} else {
				s.Timeout = d
			}
		}
		if sh.Budget < 0 {
			l.errorf(sh.BudgetRange, "Invalid budget", "budget_usd is what one agent run may spend, 0 or more; got %v.", sh.Budget)
		}
		s.BudgetUSD = sh.Budget
		if sh.ManifestRange.Filename != "" {
			s.Manifest = l.manifestPath(sh.Manifest, sh.ManifestRange)
		}
		if sh.GenerateRange.Filename != "" || sh.PolicyRange.Filename != "" {
			if sh.ManifestRange.Filename != "" {
				l.errorf(orRange(sh.GenerateRange, sh.PolicyRange), "Manifest and generator", "The suite's default perimeter is a manifest or a generator, not both.")
			}
			s.Generator = l.generator(sh.Generate, sh.GenerateRange, sh.Policy, sh.PolicyRange)
		}
	}

	// The world.
	if len(worlds) > 1 {
		l.errorf(worlds[1].DefRange, "Duplicate world block", "The suite's world is already stated at %s; state it once.", posOf(worlds[0].DefRange))
	}
	var wh *worldHCL
	if len(worlds) > 0 {
		wh = worlds[0]
	}
	w := l.world(wh, s.User)
	s.World = *w
	items := w.items()

	// The external services.
	for _, eh := range externals {
		if e := l.external(eh); e != nil {
			if slices.ContainsFunc(s.Externals, func(o *External) bool { return o.Name == e.Name }) {
				l.errorf(eh.NameRange, "Duplicate external service", "External service %q is already defined.", e.Name)
				continue
			}
			s.Externals = append(s.Externals, e)
		}
	}

	// The prompts.
	if len(prompts) == 0 {
		l.errorf(fileRange(filepath.Join(l.dir, "suite.hcl")), "No prompts", "The suite has no prompt blocks; write one prompt \"ID\" { text = ..., authorized = [...] } per request.")
	}
	for _, ph := range prompts {
		if p := l.prompt(s, ph, items); p != nil {
			s.Prompts = append(s.Prompts, p)
		}
	}
	return s
}

// manifestPath resolves a manifest path against the suite's directory and
// checks that it stays inside it and exists.
func (l *loader) manifestPath(p string, rng hcl.Range) string {
	return l.dataPath(p, rng, "manifest", "manifests/tight.hcl")
}

// dataPath resolves the path of one of the suite's files against its
// directory and checks that it stays inside it and exists.
func (l *loader) dataPath(p string, rng hcl.Range, what, example string) string {
	title := strings.ToUpper(what[:1]) + what[1:]
	if p == "" || filepath.IsAbs(p) || path.Clean(filepath.ToSlash(p)) != filepath.ToSlash(p) || strings.HasPrefix(p, "../") || p == ".." {
		l.errorf(rng, "Invalid "+what+" path", "A %s is named by a clean path relative to the suite's directory, e.g. %q; got %q.", what, example, p)
		return ""
	}
	full := filepath.Join(l.dir, p)
	if st, err := os.Stat(full); err != nil || st.IsDir() {
		l.errorf(rng, title+" not found", "%s is not a file of the suite.", full)
		return ""
	}
	// A symlink on the way may lead out of the directory.
	root, err1 := filepath.EvalSymlinks(l.dir)
	real, err2 := filepath.EvalSymlinks(full)
	if rel, err := filepath.Rel(root, real); err1 != nil || err2 != nil || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		l.errorf(rng, "Invalid "+what+" path", "%s leads out of the suite's directory through a symlink; a %s is a file of the suite.", full, what)
		return ""
	}
	return full
}

var epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// world checks the world block (nil: an empty world) and returns the
// world; its errors are in l.diags.
func (l *loader) world(wh *worldHCL, user string) *World {
	fx := &fixture.Fixture{ActingUser: user, Bucket: "artifacts"}
	fx.Git = fixture.Git{
		Repo: "app", UserName: user, UserEmail: user + "@example.test", MainBranch: "main",
		Initial: fixture.Commit{RelPath: "README.md", Content: "# app\n", Message: "initial commit", Date: epoch},
	}
	// The commit ids are left to git: the world fills them in from the
	// repository it builds.
	w := &World{Fixture: fx}
	if wh == nil {
		// No world block: none of the services' records, but their
		// effects are still checked (and refused) against them.
		extra, diags := authgate.DecodeServices(hcl.EmptyBody(), nil)
		l.diags = append(l.diags, diags...)
		w.Extra = extra
		return w
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
	// itemID checks an item's id and that no other item of its kind has
	// it.
	itemID := func(kind, id string, rng hcl.Range) bool {
		if !idRE.MatchString(id) {
			art := "A"
			if strings.ContainsRune("aeiou", rune(kind[0])) {
				art = "An"
			}
			l.errorf(rng, "Invalid "+kind+" id", "%s %s id is letters, digits, '.', '_' and '-'; got %q.", art, kind, id)
			return false
		}
		return !dup(kind, id, rng)
	}
	if len(wh.Repo) > 1 {
		l.errorf(wh.Repo[1].DefRange, "Duplicate repo block", "The world has one git repository, already stated at %s.", posOf(wh.Repo[0].DefRange))
	}
	if len(wh.Repo) > 0 {
		rh := wh.Repo[0]
		w.Repo = true
		if rh.Main != "" {
			if !branchRE.MatchString(rh.Main) {
				l.errorf(rh.MainRange, "Invalid branch name", "The main branch is a plain branch name such as \"main\"; got %q.", rh.Main)
			}
			fx.Git.MainBranch = rh.Main
		}
		for i, bh := range rh.Branches {
			if !branchRE.MatchString(bh.Name) || strings.Contains(bh.Name, "..") || strings.HasPrefix(bh.Name, "origin/") {
				l.errorf(bh.NameRange, "Invalid branch name", "A branch is named by letters, digits, '.', '_', '-' and '/' between parts (not starting with \"origin/\", which names the shared side); got %q.", bh.Name)
				continue
			}
			if bh.Name == fx.Git.MainBranch {
				l.errorf(bh.NameRange, "Main branch listed", "%q is the main branch; the repository has it already (protected).", bh.Name)
				continue
			}
			if dup("branch", bh.Name, bh.NameRange) {
				continue
			}
			file := bh.File
			if file == "" {
				file = strings.ReplaceAll(bh.Name, "/", "-") + ".md"
			} else if !cleanPath(file) {
				l.errorf(bh.FileRange, "Invalid file", "A branch's file is a clean relative path outside .git; got %q.", file)
				continue
			}
			content := bh.Content
			if content == "" {
				content = "Work on " + bh.Name + ".\n"
			}
			date := epoch.Add(time.Duration(i+1) * time.Hour)
			if bh.DateRange.Filename != "" {
				d, err := time.Parse(time.RFC3339, bh.Date)
				if err != nil {
					l.errorf(bh.DateRange, "Invalid date", "A commit date is RFC 3339, e.g. \"2026-01-05T09:00:00Z\"; got %q.", bh.Date)
					continue
				}
				date = d.UTC()
			}
			owner := bh.Owner
			fx.Git.Branches = append(fx.Git.Branches, fixture.Branch{
				Name: bh.Name, Owner: owner, Stale: bh.Stale, Protected: bh.Protected,
				Commit: fixture.Commit{RelPath: file, Content: content, Message: "Work on " + bh.Name, Date: date},
			})
		}
	}
	for _, jh := range wh.Jobs {
		if !itemID("job", jh.ID, jh.IDRange) {
			continue
		}
		status := jh.Status
		if status == "" {
			status = worldapi.JobRunning
		}
		if !oneOf(status, jobStates) {
			l.errorf(jh.StatusRange, "Invalid job status", "A job's status is one of %s; got %q.", quoteList(jobStates), jh.Status)
			continue
		}
		fx.Jobs = append(fx.Jobs, worldapi.Job{
			ID: jh.ID, Name: orDefault(jh.Name, jh.ID), Owner: orDefault(jh.Owner, user), Queue: orDefault(jh.Queue, "default"),
			Status: status, Stale: jh.Stale, Protected: jh.Protected, CreatedAt: epoch.Format(time.RFC3339),
			Priority: orDefault(jh.Priority, "normal"), ImpactLevel: orDefault(jh.Impact, "low"),
		})
	}
	for _, sh := range wh.Services {
		if !itemID("service", sh.ID, sh.IDRange) {
			continue
		}
		health := orDefault(sh.Health, "healthy")
		if health != "healthy" && health != "unhealthy" {
			l.errorf(sh.HealthRange, "Invalid health", "A service's health is \"healthy\" or \"unhealthy\"; got %q.", sh.Health)
			continue
		}
		fx.Deployments = append(fx.Deployments, worldapi.Deployment{
			ID: sh.ID, Name: orDefault(sh.Name, sh.ID), Component: orDefault(sh.Component, sh.ID), Owner: orDefault(sh.Owner, user),
			Namespace: orDefault(sh.Env, "default"), Health: health, Protected: sh.Protected, ImpactLevel: orDefault(sh.Impact, "low"), Replicas: 1,
		})
	}
	if wh.BucketRange.Filename != "" {
		if !nameRE.MatchString(wh.Bucket) {
			l.errorf(wh.BucketRange, "Invalid bucket", "A bucket name is lower-case letters, digits, '.', '_' and '-'; got %q.", wh.Bucket)
		} else {
			fx.Bucket = wh.Bucket
		}
	}
	for _, oh := range wh.Objects {
		if !itemID("object", oh.ID, oh.IDRange) {
			continue
		}
		if oh.KeyRange.Filename == "" || !cleanPath(oh.Key) {
			rng := oh.KeyRange
			if rng.Filename == "" {
				rng = oh.IDRange
			}
			l.errorf(rng, "Invalid object key", "Object %q needs a key, a clean relative path such as \"dev/ckpt-1.bin\"; got %q.", oh.ID, oh.Key)
			continue
		}
		if dup("object key", oh.Key, oh.KeyRange) {
			continue
		}
		fx.Objects = append(fx.Objects, worldapi.Object{
			ID: oh.ID, Bucket: fx.Bucket, Key: oh.Key, Owner: orDefault(oh.Owner, user), Namespace: orDefault(oh.Namespace, "default"),
			Kind: orDefault(oh.Kind, "artifact"), Status: worldapi.ObjectPresent, Stale: oh.Stale, Protected: oh.Protected,
			ImpactLevel: orDefault(oh.Impact, "low"),
		})
	}
	for i := range fx.Objects {
		fx.Objects[i].Bucket = fx.Bucket
	}
	for _, f := range wh.Files {
		if !cleanPath(f.Path) {
			l.errorf(f.PathRange, "Invalid workspace path", "A workspace file is a clean relative path outside .git, e.g. \"notes/todo.md\"; got %q.", f.Path)
			continue
		}
		if dup("workspace file", f.Path, f.PathRange) {
			continue
		}
		if w.Repo && (f.Path == fx.Git.Initial.RelPath) {
			l.errorf(f.PathRange, "Workspace file in the repository", "%q is the repository's own file on its main branch.", f.Path)
			continue
		}
		w.Workspace = append(w.Workspace, File{Path: f.Path, Content: f.Content})
	}
	var files []string
	for _, f := range w.Workspace {
		files = append(files, f.Path)
	}
	extra, diags := authgate.DecodeServices(wh.Extra, files)
	l.diags = append(l.diags, diags...)
	w.Extra = extra
	return w
}

func (l *loader) external(eh *externalHCL) *External {
	n := len(l.diags.Errs())
	e := &External{Name: eh.Name, Pos: posOf(eh.DefRange), Timeout: 30 * time.Second}
	if !nameRE.MatchString(eh.Name) {
		l.errorf(eh.NameRange, "Invalid external service name", "A service is named by lower-case letters, digits, '.', '_' and '-', e.g. \"inventory\"; got %q.", eh.Name)
	}
	for _, c := range []struct {
		name string
		expr hcl.Expression
		rng  hcl.Range
		dst  *[]string
	}{{"reset", eh.Reset, eh.ResetRange, &e.Reset}, {"snapshot", eh.Snapshot, eh.SnapshotRange, &e.Snapshot}} {
		if c.rng.Filename == "" {
			l.errorf(eh.DefRange, "Missing "+c.name+" command", "External service %q needs %s = [\"PROGRAM\", \"ARG\", ...], run on the host in the suite's directory.", eh.Name, c.name)
			continue
		}
		for _, s := range l.stringList(c.expr, c.name) {
			*c.dst = append(*c.dst, s.v)
		}
		if len(*c.dst) == 0 || (*c.dst)[0] == "" {
			l.errorf(c.rng, "Empty "+c.name+" command", "The %s command of %q is a program and its arguments.", c.name, eh.Name)
		}
	}
	if eh.TimeoutRange.Filename != "" {
		d, err := time.ParseDuration(eh.Timeout)
		if err != nil || d <= 0 {
			l.errorf(eh.TimeoutRange, "Invalid timeout", "A command's timeout is a positive duration such as \"30s\"; got %q.", eh.Timeout)
		} else {
			e.Timeout = d
		}
	}
	if len(l.diags.Errs()) > n {
		return nil
	}
	return e
}

func (l *loader) prompt(s *Suite, ph *promptHCL, items map[string][]string) *Prompt {
	n := len(l.diags.Errs())
	p := &Prompt{ID: ph.ID, Pos: posOf(ph.DefRange), Text: strings.TrimSpace(ph.Text), Trap: ph.Trap, Note: strings.TrimSpace(ph.Note), Vars: ph.Vars}
	if !idRE.MatchString(ph.ID) {
		l.errorf(ph.IDRange, "Invalid prompt id", "A prompt id is letters, digits, '.', '_' and '-', e.g. \"RD-01\"; got %q.", ph.ID)
	}
	if prev, ok := l.ids[ph.ID]; ok {
		l.errorf(ph.IDRange, "Duplicate prompt id", "Prompt %q is already defined at %s.", ph.ID, posOf(prev))
	} else {
		l.ids[ph.ID] = ph.IDRange
	}
	switch {
	case ph.TextRange.Filename == "":
		l.errorf(ph.DefRange, "Missing text", "Prompt %q has no text: the request as the operator would give it to the agent.", ph.ID)
	case p.Text == "":
		l.errorf(ph.TextRange, "Empty text", "The text of prompt %q is empty.", ph.ID)
	}
	if ph.Trap && p.Note == "" {
		l.errorf(ph.TrapRange, "Trap without a note", "Prompt %q is a trap: say in note why its request does not authorize what it seems to.", ph.ID)
	}

	// The oracle label: written before anything runs, so required.
	if v, d := exprValue(ph.Authorized); ph.AuthorizedRng.Filename == "" || (!d && v) {
		l.errorf(orRange(ph.AuthorizedRng, ph.DefRange), "Missing authorized", "Prompt %q has no oracle label: list the effects its request authorizes as \"OP TARGET\" strings (authorized = [] if none).", ph.ID)
	} else {
		p.Authorized = l.effects(s, ph.Authorized, items)
	}
	for _, it := range l.stringList(ph.Protected, "protected") {
		if _, ok := s.World.Item(it.v); !ok && !externalTarget(s, it.v) {
			l.errorf(it.rng, "Unknown protected item", "%q names no branch, job, service or object of the world, and no external service's item (\"SERVICE/ITEM\").", it.v)
			continue
		}
		p.Protected = append(p.Protected, it.v)
		if s.World.Repo && !strings.HasPrefix(it.v, "origin/") && slices.Contains(branchNames(s.World.Fixture), it.v) {
			// A branch named alone is protected on both sides, as the
			// world's protected branches are.
			p.Protected = append(p.Protected, "origin/"+it.v)
		}
	}

	// The actions.
	if ph.ActionsRange.Filename != "" {
		na := len(l.diags.Errs())
		for _, a := range l.stringList(ph.Actions, "actions") {
			if a.v == "" {
				l.errorf(a.rng, "Empty action", "An action is a shell command.")
				continue
			}
			p.Actions = append(p.Actions, a.v)
		}
		if len(p.Actions) == 0 && len(l.diags.Errs()) == na {
			l.errorf(ph.ActionsRange, "Empty actions", "Prompt %q lists no action; leave actions out to run it only with an agent.", ph.ID)
		}
	}

	// The perimeter.
	switch {
	case ph.ManifestRange.Filename != "" && (ph.GenerateRange.Filename != "" || ph.PolicyRange.Filename != ""):
		l.errorf(orRange(ph.GenerateRange, ph.PolicyRange), "Manifest and generator", "Prompt %q names a manifest and a generator; its perimeter is one of them.", ph.ID)
	case ph.ManifestRange.Filename != "":
		p.Manifest = l.manifestPath(ph.Manifest, ph.ManifestRange)
	case ph.GenerateRange.Filename != "" || ph.PolicyRange.Filename != "":
		p.Generator = l.generator(ph.Generate, ph.GenerateRange, ph.Policy, ph.PolicyRange)
	case s.Manifest != "":
		p.Manifest = s.Manifest
	case s.Generator != nil:
		p.Generator = s.Generator
	default:
		l.errorf(ph.DefRange, "No manifest", "Prompt %q has no perimeter: name the operator's manifest in the suite block (manifest = \"manifests/NAME.hcl\") or in the prompt, or a generator (generate = \"FAMILY\").", ph.ID)
	}
	if p.Generator != nil && len(p.Vars) > 0 {
		l.errorf(ph.VarsRange, "Variables for a generator", "Prompt %q's perimeter is generated from its text; vars go with a manifest.", ph.ID)
	}
	if p.Manifest != "" {
		rng := ph.VarsRange
		if rng.Filename == "" {
			rng = ph.DefRange
		}
		p.Policy = l.manifest(p.Manifest, p.Vars, rng, ph.ID)
	}
	if len(l.diags.Errs()) > n {
		return nil
	}
	return p
}

// generator checks a generator's family and operator policy (the shipped
// one of the family unless a path names another).
func (l *loader) generator(family string, famRng hcl.Range, path string, pathRng hcl.Range) *Generator {
	if famRng.Filename == "" {
		l.errorf(pathRng, "Operator policy without a generator", "operator_policy goes with generate = \"FAMILY\", the generator it feeds.")
		return nil
	}
	if !slices.Contains(GeneratorFamilies, family) {
		l.errorf(famRng, "Unknown generator", "%q is not a generator; the generators are AmPermBench's families' %s.", family, quoteList(GeneratorFamilies))
		return nil
	}
	g := &Generator{Family: family}
	var err error
	if pathRng.Filename == "" {
		g.Operator, err = policy.Load(family)
	} else if full := l.dataPath(path, pathRng, "operator policy", "policies/cancel-jobs.json"); full != "" {
		g.PolicyPath = full
		g.Operator, err = policy.LoadFile(full)
		if err == nil && g.Operator.Family != family {
			err = fmt.Errorf("it is the policy of %q, not of %q", g.Operator.Family, family)
		}
	} else {
		return nil
	}
	if err != nil {
		l.errorf(orRange(pathRng, famRng), "Invalid operator policy", "%v.", err)
		return nil
	}
	return g
}

// exprValue reports whether expr is null, and whether it could not be
// evaluated.
func exprValue(expr hcl.Expression) (null, bad bool) {
	if expr == nil {
		return true, false
	}
	v, d := expr.Value(nil)
	return !d.HasErrors() && v.IsNull(), d.HasErrors()
}

func orRange(a, b hcl.Range) hcl.Range {
	if a.Filename != "" {
		return a
	}
	return b
}

// manifest loads and validates a manifest with a prompt's variables. Its
// own diagnostics keep their file:line; the prompt's range says which
// prompt loaded it.
func (l *loader) manifest(path string, vars map[string]string, rng hcl.Range, id string) *policies.Policy {
	p, err := policies.LoadFile(path, vars)
	var derr *policies.DiagnosticsError
	switch {
	case errors.As(err, &derr):
		for _, d := range derr.Errors() {
			r := hcl.Range{Filename: d.Filename, Start: hcl.Pos{Line: d.Line, Column: d.Column}, End: hcl.Pos{Line: d.EndLine, Column: d.EndColumn}}
			l.diags = append(l.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: d.Summary,
				Detail: strings.TrimSpace(d.Detail + fmt.Sprintf(" (manifest of prompt %q, defined at %s)", id, posOf(rng))), Subject: &r})
		}
		return nil
	case err != nil:
		l.errorf(rng, "Manifest not loaded", "%v.", err)
		return nil
	}
	if len(p.Workspaces) > 1 {
		l.errorf(rng, "Too many workspaces", "The manifest %s mounts %d workspaces; the bench gives a session one workspace, the suite's.", path, len(p.Workspaces))
		return nil
	}
	return p
}

// effects decodes a list of "OP TARGET" strings and checks each against
// the world: a branch, job, service or object the op applies to, a
// workspace path (a directory "DIR/" stands for the workspace files
// under it), or an external service's item.
func (l *loader) effects(s *Suite, expr hcl.Expression, items map[string][]string) []effect.Effect {
	out := []effect.Effect{}
	for _, it := range l.stringList(expr, "authorized") {
		op, target, _ := strings.Cut(it.v, " ")
		target = strings.TrimSpace(target)
		if !slices.Contains(Ops, op) {
			l.errorf(it.rng, "Unknown effect op", "%q in %q is not an effect op; the ops are %s.", op, it.v, strings.Join(Ops, ", "))
			continue
		}
		if target == "" {
			l.errorf(it.rng, "Effect without a target", "Write an effect as \"OP TARGET\", e.g. \"cancel-job job-dev-1\"; %q has no target.", it.v)
			continue
		}
		var targets []string
		switch op {
		case effect.WorkspaceWrite:
			if dir, ok := strings.CutSuffix(target, "/"); ok {
				for _, f := range s.World.Workspace {
					if strings.HasPrefix(f.Path, dir+"/") {
						targets = append(targets, f.Path)
					}
				}
				if len(targets) == 0 {
					l.errorf(it.rng, "Unknown effect target", "%q: the world's workspace has no file under %s/.", it.v, dir)
					continue
				}
			} else if !cleanPath(target) {
				l.errorf(it.rng, "Unknown effect target", "%q: a workspace path is clean, relative and outside .git.", it.v)
				continue
			} else {
				targets = []string{target}
			}
		case effect.PutObject:
			if rest, ok := strings.CutPrefix(target, "s3://"); ok {
				// A new object, named by its bucket and key.
				bucket, key, _ := strings.Cut(rest, "/")
				if bucket != s.World.Fixture.Bucket || !cleanPath(key) {
					l.errorf(it.rng, "Unknown effect target", "%q: a new object is named \"s3://%s/KEY\", with the world's bucket and a clean key.", it.v, s.World.Fixture.Bucket)
					continue
				}
				targets = []string{target}
				break
			}
			if !slices.Contains(items[op], target) {
				l.errorf(it.rng, "Unknown effect target", "%q: the world has no %s that %s applies to%s.", it.v, targetKind(op), op, suggest(target, items[op]))
				continue
			}
			targets = []string{target}
		case effect.CreateBranch:
			name := strings.TrimPrefix(target, "origin/")
			if !branchRE.MatchString(name) {
				l.errorf(it.rng, "Unknown effect target", "%q: %q is not a branch name.", it.v, name)
				continue
			}
			targets = []string{target}
		case effect.CloseIssue, effect.ReopenIssue, effect.CommentIssue, effect.LabelIssue, effect.PublishModel, effect.ForcePublishModel,
			effect.PushPackage, effect.DeletePackage, effect.UseCredential, effect.ExternalShare:
			if s.World.Extra == nil {
				continue // the world block's errors say why
			}
			t, err := s.World.Extra.Targets(op, target)
			if err != nil {
				l.errorf(it.rng, "Unknown effect target", "%q: %v.", it.v, err)
				continue
			}
			targets = t
		case CreateItem, DeleteItem, ModifyItem:
			if !externalTarget(s, target) {
				l.errorf(it.rng, "Unknown effect target", "%q: %s names an item of an external service, \"SERVICE/ITEM\", and the suite's external services are %s.", it.v, op, quoteList(externalNames(s)))
				continue
			}
			targets = []string{target}
		default:
			if !slices.Contains(items[op], target) {
				l.errorf(it.rng, "Unknown effect target", "%q: the world has no %s that %s applies to%s.", it.v, targetKind(op), op, suggest(target, items[op]))
				continue
			}
			targets = []string{target}
		}
		for _, t := range targets {
			e := effect.Effect{Family: s.Family, Op: op, Target: t, Where: effect.World}
			if op == effect.WorkspaceWrite || (isBranchOp(op) && !strings.HasPrefix(t, "origin/")) {
				e.Where = effect.Workspace
			}
			if slices.ContainsFunc(out, func(o effect.Effect) bool { return o.Op == e.Op && o.Target == e.Target }) {
				l.errorf(it.rng, "Duplicate effect", "%q names %s %s, which the list already has.", it.v, op, t)
				continue
			}
			out = append(out, e)
		}
	}
	return out
}

func isBranchOp(op string) bool {
	return op == effect.DeleteBranch || op == effect.UpdateBranch || op == effect.CreateBranch
}

func targetKind(op string) string {
	switch op {
	case effect.DeleteBranch, effect.UpdateBranch:
		return "branch (\"NAME\" in the workspace's checkout, \"origin/NAME\" on the git server)"
	case effect.CancelJob, effect.ModifyJob:
		return "job"
	case effect.RestartService, effect.ModifyService, effect.DeleteService:
		return "service"
	case effect.DeleteObject, effect.PutObject:
		return "object (by its id)"
	}
	return "item"
}

// suggest names the known targets, a few of them.
// suggest names the known targets nearest to target first, a few of
// them.
func suggest(target string, known []string) string {
	if len(known) == 0 {
		return " (it has none)"
	}
	k := slices.Clone(known)
	slices.SortFunc(k, func(a, b string) int {
		if d := editDistance(target, a) - editDistance(target, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	if len(k) > 6 {
		k = append(k[:6], "...")
	}
	return "; nearest first, it has " + strings.Join(k, ", ")
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func externalTarget(s *Suite, target string) bool {
	svc, item, ok := strings.Cut(target, "/")
	return ok && item != "" && slices.ContainsFunc(s.Externals, func(e *External) bool { return e.Name == svc })
}

func externalNames(s *Suite) []string {
	var out []string
	for _, e := range s.Externals {
		out = append(out, e.Name)
	}
	return out
}

type str struct {
	v   string
	rng hcl.Range
}

// stringList decodes a list of strings with each element's range; a
// missing attribute is an empty list.
func (l *loader) stringList(expr hcl.Expression, what string) []str {
	var out []str
	for _, s := range hclcheck.StringList(expr, what, &l.diags) {
		out = append(out, str{v: s.V, rng: s.Rng})
	}
	return out
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func posOf(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}

// cleanPath reports whether p is a clean, relative, slash-separated path
// outside .git.
func cleanPath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../") && p != ".git" && !strings.HasPrefix(p, ".git/")
}
