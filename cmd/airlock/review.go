package main

import (
	"fmt"
	"path"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
)

func (c *cli) newDiffCommand() *cobra.Command {
	var asJSON, unified bool
	cmd := &cobra.Command{
		Use:   "diff [flags] ID",
		Short: "List the workspace changes a session made",
		Long: `Diff lists what a stopped session changed in its overlay workspaces: added,
modified, deleted and renamed files, mode, symlink and type changes, and under
each change the commit policy would refuse, the rule and the reason (a
protected path or ref, git metadata or hooks, a symlink out of the workspace,
a conflict with the host). The host directory is untouched until 'airlock commit'. --unified prints a unified diff
of text files instead. The sandbox named the files: in the list their
non-printable characters are escaped (\n, \x1b, \u202e, backslashes
doubled); in the unified diff a name with a control character, a double quote,
a backslash or a non-printable character is quoted as git quotes it, with Go's
escapes ("a/workspace/x\ny").`,
		Example: `  airlock diff 3f9c2a1b
  airlock diff --unified 3f9c2a1b | less
  airlock diff --json 3f9c2a1b | jq '.workspaces[].changes[].path'`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if unified {
				b, err := c.client().UnifiedDiff(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				_, err = c.stdout.Write(b)
				return err
			}
			cs, err := c.client().Diff(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(cs)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
			for _, w := range cs.Workspaces {
				fmt.Fprintf(tw, "# %s (%s): %d changes\n", w.Target, w.HostPath, len(w.Changes))
				verdict := map[string]string{}
				for _, r := range w.Rejected {
					verdict[r.Path] = approvals.EscapeText(fmt.Sprintf("would be rejected (%s: %s)", r.Rule, r.Reason))
				}
				for _, cf := range w.Conflicts {
					verdict[cf.Path] = approvals.EscapeText("conflicts: " + cf.Reason)
				}
				for _, ch := range w.Changes {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Kind, approvals.EscapeText(ch.Path), changeDetail(ch))
					if v := verdict[path.Join(w.Target, ch.Path)]; v != "" {
						fmt.Fprintf(tw, "\t\t  %s\n", v)
					}
				}
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the change set as JSON")
	cmd.Flags().BoolVarP(&unified, "unified", "u", false, "print a unified diff")
	return cmd
}

// changeDetail describes a change beyond its kind and path, escaped: the
// sandbox chose its names and link targets.
func changeDetail(ch api.Change) string { return approvals.EscapeText(changeDetailRaw(ch)) }

func changeDetailRaw(ch api.Change) string {
	switch ch.Kind {
	case "renamed":
		return "from " + ch.OldPath
	case "mode":
		return fmt.Sprintf("%04o -> %04o", ch.OldMode, ch.Mode)
	case "symlink":
		return ch.OldLink + " -> " + ch.LinkTarget
	case "type":
		return ch.OldType + " -> " + ch.Type
	}
	if ch.Type == "symlink" {
		return "-> " + ch.LinkTarget
	}
	if ch.Type != "file" {
		return ch.Type
	}
	return ""
}

func (c *cli) newCommitCommand() *cobra.Command {
	var partial, asJSON bool
	var targets []string
	cmd := &cobra.Command{
		Use:   "commit [flags] ID",
		Short: "Apply a session's workspace changes to the host",
		Long: `Commit applies a stopped session's changes to the host directories, file by
file and atomically, under the manifest's commit policy: changes to protected
paths, protected git refs or (with preserve_untracked) untracked files are
rejected, and so is any change whose host file changed since the session
started (a conflict). Without --partial a single rejection or conflict means
nothing is applied. Exit status: 0 when everything was applied, 1 otherwise.`,
		Example: `  airlock commit 3f9c2a1b
  airlock commit --partial 3f9c2a1b`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			res, err := c.client().Commit(cmd.Context(), args[0], api.CommitRequest{Partial: partial, Targets: targets})
			if err != nil {
				return err
			}
			if asJSON {
				if err := c.printJSON(res); err != nil {
					return err
				}
			} else {
				for _, p := range res.Applied {
					fmt.Fprintf(c.stdout, "applied   %s\n", p)
				}
				for _, r := range res.Rejected {
					fmt.Fprintf(c.stdout, "rejected  %s (%s: %s)\n", r.Path, r.Rule, r.Reason)
				}
				for _, cf := range res.Conflicts {
					fmt.Fprintf(c.stdout, "conflict  %s (%s)\n", cf.Path, cf.Reason)
				}
			}
			if n := len(res.Rejected) + len(res.Conflicts); n > 0 {
				if res.Committed {
					return fmt.Errorf("%d changes were not applied", n)
				}
				return fmt.Errorf("nothing applied: %d changes were refused (see above; --partial applies the rest)", n)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&partial, "partial", false, "apply the changes no rule rejects")
	cmd.Flags().StringSliceVar(&targets, "target", nil, "only the workspace mounted at this sandbox path (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (c *cli) newDiscardCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "discard ID",
		Short:   "Drop a session's workspace changes",
		Long:    `Discard drops every change a stopped session made to its overlay workspaces. The host directories were never modified.`,
		Example: `  airlock discard 3f9c2a1b`,
		Args:    exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return c.client().Discard(cmd.Context(), args[0])
		}),
	}
}
