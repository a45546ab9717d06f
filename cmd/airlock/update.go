package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
)

func (c *cli) newUpdateCommand() *cobra.Command {
	var (
		mo     manifestOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "update [flags] ID -f MANIFEST",
		Short: "Revise a running session's policy, live",
		Long: `Update decodes the manifest locally and sends it to the daemon as the
session's revised policy. The daemon applies the difference with the policy
the session runs under, live, and gives the policy the next version:

  egress allow and deny entries added or removed: names resolve, or are
  refused, at once; destinations opened only for removed entries are
  closed and the session's connections to them are ended.
  egress http rules and inspect: every request from then on is decided by
  the revised rules, also on connections opened before; requests held for
  approval that the revised rules allow or deny are decided by them; TLS
  passed through unseen to a host that now has rules is closed.
  secrets: a changed source or host list takes effect on the next request
  (the sandbox's placeholder stays); a removed secret is no longer
  injected. A secret cannot be added, nor its env_var or path changed.
  credentials: a changed one is re-minted and its old tokens revoked, an
  unchanged one keeps its token, an added one is minted and delivered, a
  removed one is revoked. Minting comes first: if it fails, nothing
  changes.

image, user, command, env, workdir, capabilities, workspaces and mounts
cannot change on a running session; timeout, resources, approval and the
egress block's l7, l7_ports, ipv6, on_block and allow_private are not
revisable yet. A manifest that changes any of them is refused as a whole,
each field named with the reason, and nothing changes. A manifest without
a command keeps the running one.

The revision is one audit event (layer "policy", action "revised"), and
every later event names the new policy version; "airlock inspect" shows
the version.`,
		Example: `  airlock update 3f9c2a1b -f task.hcl
  airlock update --var env=staging 3f9c2a1b -f task.hcl --json`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			p, err := c.policy(&mo, nil, false)
			if err != nil {
				return err
			}
			s, err := c.client().UpdateSession(cmd.Context(), args[0], api.UpdateRequest{Policy: *p})
			if err != nil {
				return err
			}
			c.printWarnings(s)
			if asJSON {
				return c.printJSON(s)
			}
			c.printRevision(s)
			return nil
		}),
	}
	cmd.Flags().StringVarP(&mo.file, "file", "f", "", "the session's revised manifest (HCL)")
	cmd.Flags().StringArrayVar(&mo.vars, "var", nil, "set a manifest variable: NAME=VALUE (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session and its revision as JSON")
	return cmd
}

// printRevision prints what a revision changed, one line each.
func (c *cli) printRevision(s *api.Session) {
	r := s.Revision
	if r == nil {
		fmt.Fprintf(c.stdout, "%s: nothing to revise (policy version %d)\n", s.ID, s.PolicyVersion)
		return
	}
	fmt.Fprintf(c.stdout, "%s: policy version %d (was %d)\n", s.ID, r.Version, r.Previous)
	for _, l := range []struct {
		name   string
		change []string
	}{
		{"egress allow added", r.Allow.Added}, {"egress allow removed", r.Allow.Removed}, {"egress allow kept", r.Allow.Kept},
		{"egress deny added", r.Deny.Added}, {"egress deny removed", r.Deny.Removed}, {"egress deny kept", r.Deny.Kept},
		{"unpinned", r.Unpinned},
	} {
		if len(l.change) > 0 {
			fmt.Fprintf(c.stdout, "  %s: %s\n", l.name, strings.Join(l.change, ", "))
		}
	}
	var l7 []struct {
		name   string
		change []string
	}
	if r.HTTP != nil {
		l7 = append(l7, []struct {
			name   string
			change []string
		}{{"http rules added", r.HTTP.Added}, {"http rules removed", r.HTTP.Removed}, {"http rules kept", r.HTTP.Kept}}...)
	}
	if r.Secrets != nil {
		l7 = append(l7, []struct {
			name   string
			change []string
		}{{"secrets changed", r.Secrets.Changed}, {"secrets removed", r.Secrets.Removed}, {"secrets kept", r.Secrets.Kept}}...)
	}
	for _, l := range l7 {
		if len(l.change) > 0 {
			fmt.Fprintf(c.stdout, "  %s: %s\n", l.name, strings.Join(l.change, ", "))
		}
	}
	if r.Inspect {
		fmt.Fprintf(c.stdout, "  inspect: %s\n", s.Policy.Egress.Inspect)
	}
	if r.Allow.Changed() || r.Deny.Changed() || r.HTTP != nil || r.Inspect || r.Secrets != nil {
		fmt.Fprintf(c.stdout, "  connections cut: %d\n", r.ConnectionsCut)
	}
	if cr := r.Credentials; cr != nil {
		toks := func(ts []api.CredentialToken) []string {
			var out []string
			for _, t := range ts {
				if t.ID == "" {
					out = append(out, t.Name)
					continue
				}
				out = append(out, t.Name+" (jti "+t.ID+")")
			}
			return out
		}
		for _, l := range []struct {
			name   string
			change []string
		}{
			{"credentials re-minted", toks(cr.Reminted)}, {"credentials added", toks(cr.Added)},
			{"credentials removed", cr.Removed}, {"credentials revoked", toks(cr.Revoked)}, {"credentials kept", toks(cr.Kept)},
		} {
			if len(l.change) > 0 {
				fmt.Fprintf(c.stdout, "  %s: %s\n", l.name, strings.Join(l.change, ", "))
			}
		}
		fmt.Fprintf(c.stdout, "  tokens minted: %d\n", r.CredentialsReminted)
	}
}
