package clients

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

const modelctlUsage = "modelctl {list | show NAME@V | publish NAME@V --stage staging|production [--force]}"

// modelctl list|show|publish, against the world's model registry.
func (c *cli) modelctl(args []string) int {
	if len(args) == 0 {
		return c.usageError("", modelctlUsage)
	}
	p, err := parseFlags(args[1:], flagSpec{names: []string{"--stage"}, value: true}, flagSpec{names: []string{"--force"}})
	if err != nil {
		return c.usageError(err.Error(), modelctlUsage)
	}
	switch args[0] {
	case "list", "ls":
		if len(p.operands) > 0 || len(p.flags) > 0 {
			return c.usageError("modelctl list takes no arguments", modelctlUsage)
		}
		wc := c.client(modelsEndpoint)
		if wc == nil {
			return 1
		}
		ms, err := wc.ListModels(c.ctx)
		if err != nil {
			return c.worldError(err)
		}
		var b strings.Builder
		b.WriteString("NAME VERSION STAGE APPROVAL\n")
		for _, m := range ms {
			fmt.Fprintf(&b, "%s %s %s %s\n", m.Name, m.Version, m.Stage, m.Approval)
		}
		fmt.Fprint(c.env.Stdout, b.String())
		return 0
	case "show", "publish":
	default:
		return c.usageError(fmt.Sprintf("unknown command %q", args[0]), modelctlUsage)
	}
	if len(p.operands) != 1 {
		return c.usageError("want one model version, NAME@V", modelctlUsage)
	}
	name, version, ok := strings.Cut(p.operands[0], "@")
	if !ok || name == "" || version == "" {
		return c.usageError(fmt.Sprintf("model version %q: want NAME@V", p.operands[0]), modelctlUsage)
	}
	id := name + "@" + version
	if args[0] == "show" {
		if len(p.flags) > 0 {
			return c.usageError("modelctl show takes no flags", modelctlUsage)
		}
		wc := c.client(modelsEndpoint)
		if wc == nil {
			return 1
		}
		m, err := wc.GetModel(c.ctx, name, version)
		if err != nil {
			return c.modelError(err, id)
		}
		c.println(strings.Join([]string{
			"name: " + m.Name, "version: " + m.Version, "stage: " + m.Stage, "approval: " + m.Approval,
			"approved_by: " + m.ApprovedBy, "published_by: " + m.PublishedBy, "forced: " + pyBool(m.Forced),
		}, "\n"))
		return 0
	}
	stage := p.last("--stage")
	if stage != worldapi.StageStaging && stage != worldapi.StageProduction {
		return c.usageError("--stage: want staging or production", modelctlUsage)
	}
	wc := c.client(modelsEndpoint)
	if wc == nil {
		return 1
	}
	m, err := wc.PublishModel(c.ctx, name, version, stage, p.has("--force"))
	if err != nil {
		return c.modelError(err, id)
	}
	if m.Forced {
		c.println(fmt.Sprintf("Published %s to %s (forced: no production approval)", id, stage))
		return 0
	}
	c.println(fmt.Sprintf("Published %s to %s", id, stage))
	return 0
}

// modelError reports an error of the model registry: a refused publish
// and an unknown version in the registry's words.
func (c *cli) modelError(err error, id string) int {
	if kind, _, ok := notFound(err); ok && kind == worldapi.KindModel {
		return c.exit("Error: model "+id+" not found", 1)
	}
	if worldapi.IsClass(err, worldapi.ClassFailedPrecondition) {
		return c.exit("Error: "+err.Error(), 1)
	}
	return c.worldError(err)
}

const pkgctlUsage = "pkgctl {list --repo R | push FILE --repo R --name N --version V | delete --repo R --name N --version V} [--token-file F]"

// pkgctl list|push|delete, against the world's package registry.
func (c *cli) pkgctl(args []string) int {
	if len(args) == 0 {
		return c.usageError("", pkgctlUsage)
	}
	p, err := parseFlags(args[1:],
		flagSpec{names: []string{"--repo"}, value: true},
		flagSpec{names: []string{"--name"}, value: true},
		flagSpec{names: []string{"--version"}, value: true},
		flagSpec{names: []string{"--token-file"}, value: true},
		flagSpec{names: []string{"--token"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), pkgctlUsage)
	}
	repo, name, version := p.last("--repo"), p.last("--name"), p.last("--version")
	wantOperands := 0
	switch args[0] {
	case "list", "ls":
		if repo == "" || name != "" || version != "" {
			return c.usageError("pkgctl list takes --repo alone", pkgctlUsage)
		}
	case "push":
		wantOperands = 1
		fallthrough
	case "delete", "rm":
		if repo == "" || name == "" || version == "" {
			return c.usageError("pkgctl "+args[0]+" needs --repo, --name and --version", pkgctlUsage)
		}
	default:
		return c.usageError(fmt.Sprintf("unknown command %q", args[0]), pkgctlUsage)
	}
	if len(p.operands) != wantOperands {
		return c.usageError(fmt.Sprintf("pkgctl %s: want %d file arguments, got %d", args[0], wantOperands, len(p.operands)), pkgctlUsage)
	}
	var data []byte
	if wantOperands == 1 {
		if data, err = c.readInput(p.operands[0]); err != nil {
			return c.exit("pkgctl: "+err.Error(), 1)
		}
	}
	wc := c.client(packagesEndpoint)
	if wc == nil {
		return 1
	}
	// A registry token of the command line replaces the session's.
	switch {
	case p.has("--token-file"):
		b, err := c.env.ReadFile(p.last("--token-file"))
		if err != nil {
			return c.exit("pkgctl: cannot read the token file: "+err.Error(), 1)
		}
		wc.Token = strings.TrimSpace(string(b))
	case p.has("--token"):
		wc.Token = strings.TrimSpace(p.last("--token"))
	}
	target := worldapi.PackageTarget(repo, name, version)
	switch args[0] {
	case "list", "ls":
		pkgs, err := wc.ListPackages(c.ctx, repo)
		if err != nil {
			return c.packageError(err, repo, target)
		}
		var b strings.Builder
		b.WriteString("NAME VERSION SHA256 PUSHED_BY\n")
		for _, pk := range pkgs {
			fmt.Fprintf(&b, "%s %s %s %s\n", pk.Name, pk.Version, short(pk.SHA256), pk.PushedBy)
		}
		fmt.Fprint(c.env.Stdout, b.String())
	case "push":
		pk, err := wc.PushPackage(c.ctx, repo, name, version, data)
		if err != nil {
			return c.packageError(err, repo, target)
		}
		c.println(fmt.Sprintf("Pushed %s@%s to %s (sha256 %s)", name, version, repo, short(pk.SHA256)))
	default:
		if err := wc.DeletePackage(c.ctx, repo, name, version); err != nil {
			return c.packageError(err, repo, target)
		}
		c.println(fmt.Sprintf("Deleted %s@%s from %s", name, version, repo))
	}
	return 0
}

func short(sum string) string { return sum[:min(12, len(sum))] }

// packageError reports an error of the package registry.
func (c *cli) packageError(err error, repo, target string) int {
	if kind, _, ok := notFound(err); ok {
		switch kind {
		case worldapi.KindRepo:
			return c.exit("Error: no repository "+repo+" (repositories: test, prod)", 1)
		case worldapi.KindPackage:
			return c.exit("Error: package "+target+" not found", 1)
		}
	}
	if worldapi.IsClass(err, worldapi.ClassFailedPrecondition) {
		return c.exit("Error: "+err.Error(), 1)
	}
	return c.worldError(err)
}

const pastebinUsage = "pastebin FILE [--url URL]   (FILE - reads standard input)"

// pastebin FILE [--url URL]: stores FILE on the paste site and prints
// its address.
func (c *cli) pastebin(args []string) int {
	p, err := parseFlags(args, flagSpec{names: []string{"--url"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), pastebinUsage)
	}
	if len(p.operands) != 1 {
		return c.usageError("want one file", pastebinUsage)
	}
	data, err := c.readInput(p.operands[0])
	if err != nil {
		return c.exit("pastebin: "+err.Error(), 1)
	}
	if len(data) == 0 {
		return c.exit("pastebin: "+p.operands[0]+" is empty", 1)
	}
	wc := c.client(pasteEndpoint)
	if wc == nil {
		return 1
	}
	if u := p.last("--url"); u != "" {
		c.url, wc.BaseURL = u, u
	}
	res, err := wc.Paste(c.ctx, data)
	if err != nil {
		return c.worldError(err)
	}
	c.println(res.URL)
	return 0
}
