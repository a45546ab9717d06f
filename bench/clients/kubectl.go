package clients

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// kubectl get deployment|deployments [-n NS] [-l SELECTOR]
// kubectl describe deployment <service-id> -n <env>
// kubectl rollout restart <targets...> -n <env> [ignored...]
func (c *cli) kubectl(args []string) int {
	switch {
	case len(args) >= 2 && args[0] == "get" && (args[1] == "deployment" || args[1] == "deployments"):
		return c.kubectlGet(args)
	case len(args) >= 2 && args[0] == "describe" && args[1] == "deployment":
		return c.kubectlDescribe(args)
	case len(args) >= 2 && args[0] == "rollout" && args[1] == "restart":
		return c.kubectlRestart(args)
	}
	return c.exit("Unsupported kubectl invocation", 2)
}

// label is one key=value chunk of a selector.
type label struct{ key, value string }

// parseSelector splits a selector into key=value chunks at the first "=";
// a later chunk with the same key replaces an earlier one (a Python dict).
func parseSelector(sel string) ([]label, bool) {
	if sel == "" {
		return nil, true
	}
	var out []label
	for _, chunk := range strings.Split(sel, ",") {
		k, v, ok := strings.Cut(chunk, "=")
		if !ok {
			return nil, false
		}
		if i := slices.IndexFunc(out, func(l label) bool { return l.key == k }); i >= 0 {
			out[i].value = v
			continue
		}
		out = append(out, label{k, v})
	}
	return out, true
}

// matches applies a selector the way the original did: only owner,
// component and health can match; any other key matches nothing.
func matches(d *worldapi.Deployment, labels []label) bool {
	for _, l := range labels {
		var v string
		switch l.key {
		case "owner":
			v = d.Owner
		case "component":
			v = d.Component
		case "health":
			v = d.Health
		default:
			return false
		}
		if v != l.value {
			return false
		}
	}
	return true
}

func (c *cli) kubectlGet(args []string) int {
	var ns, sel string
	for i := 2; i < len(args); i += 2 {
		switch args[i] {
		case "-n", "-l":
			if i+1 >= len(args) {
				return c.indexError()
			}
			if args[i] == "-n" {
				ns = args[i+1]
			} else {
				sel = args[i+1]
			}
		default:
			return c.exit("Unsupported kubectl arg: "+args[i], 1)
		}
	}
	labels, ok := parseSelector(sel)
	if !ok {
		return c.exit("Unsupported label selector: "+sel, 1)
	}
	wc := c.client(servicesEndpoint)
	if wc == nil {
		return 1
	}
	deps, err := wc.ListDeployments(c.ctx, ns)
	if err != nil {
		return c.worldError(err)
	}
	var b strings.Builder
	b.WriteString("NAME READY STATUS OWNER COMPONENT\n")
	for i := range deps {
		d := &deps[i]
		if (ns != "" && d.Namespace != ns) || !matches(d, labels) {
			continue
		}
		ready := "0/1"
		if d.Health == "healthy" {
			ready = "1/1"
		}
		fmt.Fprintf(&b, "%s %s %s %s %s\n", d.ID, ready, d.Health, d.Owner, d.Component)
	}
	fmt.Fprint(c.env.Stdout, b.String())
	return 0
}

func (c *cli) kubectlDescribe(args []string) int {
	if len(args) != 5 || args[3] != "-n" {
		return c.exit("Usage: kubectl describe deployment <service-id> -n <env>", 2)
	}
	id, ns := args[2], args[4]
	wc := c.client(servicesEndpoint)
	if wc == nil {
		return 1
	}
	d, err := wc.GetDeployment(c.ctx, ns, id)
	if err != nil {
		if kind, _, ok := notFound(err); ok && kind == worldapi.KindDeployment {
			return c.exit("Unknown deployment: "+id, 2)
		}
		return c.worldError(err)
	}
	c.println(strings.Join([]string{
		"Name: " + d.ID,
		"Namespace: " + d.Namespace,
		"Owner: " + d.Owner,
		"Component: " + d.Component,
		"Health: " + d.Health,
		"Protected: " + pyBool(d.Protected),
		"RestartCount: " + strconv.Itoa(d.RestartCount),
	}, "\n"))
	return 0
}

func (c *cli) kubectlRestart(args []string) int {
	idx := slices.Index(args, "-n")
	if idx < 0 {
		return c.exit("kubectl rollout restart requires -n", 2)
	}
	if idx+1 >= len(args) {
		return c.indexError()
	}
	targets, ns := args[2:idx], args[idx+1]
	if len(targets) == 0 {
		return c.exit("No deployments supplied", 2)
	}
	if targets[0] == "deployment" || targets[0] == "deployments" {
		targets = targets[1:]
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = strings.TrimPrefix(t, "deployment/")
	}
	if len(names) == 0 {
		// The original rewrote its state unchanged: nothing to do.
		return 0
	}
	wc := c.client(servicesEndpoint)
	if wc == nil {
		return 1
	}
	if _, err := wc.RestartDeployments(c.ctx, ns, names); err != nil {
		if kind, target, ok := notFound(err); ok && kind == worldapi.KindDeployment {
			return c.exit("Unknown deployment: "+target, 2)
		}
		return c.worldError(err)
	}
	return 0
}
