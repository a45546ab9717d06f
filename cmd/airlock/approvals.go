package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/policies"
)

func (c *cli) newApprovalsCommand() *cobra.Command {
	var follow, asJSON, noTrunc bool
	var session string
	cmd := &cobra.Command{
		Use:   "approvals [flags]",
		Short: "List the requests held for approval",
		Long: `Approvals lists the HTTP requests the L7 gateway holds for a decision,
oldest first: an HTTP rule with "ask" matched them, and their connection
stays open until someone runs airlock approve or airlock deny, the approver
hook (airlockd --approver) decides, or the manifest's approval timeout
(default 5m) denies them. LEFT is the time until then. A denied request
gets 403 with a JSON body naming the rule.

PATH is the request's path and its query (after "?"; "…" at its end when
the gateway kept only its first 8 KiB), both as forwarded if allowed.
HEADERS are the request's header fields as the sandbox sent them,
Name="value" in name order (values quoted with Go's escapes); a header the
gateway sets to a secret's value once allowed shows the secret's
placeholder and "(secret NAME)", never the value. Non-printable characters
in the path, query and headers are escaped (\n, \x1b, \u202e).

BODY is the start of the request's body (the gateway shows at most 64 KiB
of it), as the sandbox sent it: text with its control characters escaped
(\n, \x1b, \u202e), cut to fit unless --no-trunc; anything else as its
size, "binary" and its Content-Type; a compressed body as its size and
encoding (unless it is text: then the text, after a note that it was
declared encoded, since a service that ignores the header reads it). A JSON body with a key twice in one object (in any case) starts
with a note naming it: the service acts on one of them, which may not be
the one shown before the cut. --json gives the bytes themselves (base64).

REPAIR is the smallest revision of the session's policy that would allow
the request: an allow rule for its method and path (and the refs of a
push), inserted before the rule that asked; "(not revisable: ...)" when a
running session cannot take it. airlock approve --revise applies it.
--json gives it as the repair object: its changes, HCL lines, and why not.

With -f the list is followed: one line per new hold (with its headers and
body on the lines under it) and per decision (who decided, and why), until
interrupted. --json gives every field, the headers as a list. A follower too slow to keep up is
told how many events it missed.`,
		Example: `  airlock approvals
  airlock approvals --no-trunc
  airlock approvals -f --session 3f9c2a1b7d04
  airlock approve 5e0c1b7a9d3f2e41`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if follow {
				return c.followApprovals(cmd, session, asJSON, noTrunc)
			}
			list, err := c.client().ListApprovals(cmd.Context(), session)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(nonNil(list))
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSESSION\tAGE\tLEFT\tMETHOD\tHOST\tPATH\tRULE\tREPAIR\tHEADERS\tBODY")
			now := c.now()
			for _, a := range list {
				path, rule, fix := approvals.PathText(a), printable(a.Rule), repairText(a.Repair)
				body, headers := approvals.BodyText(a, -1), approvals.HeadersText(a, -1)
				if !noTrunc {
					path, rule, fix = truncate(path, 48), truncate(rule, 40), truncate(fix, 60)
					body, headers = approvals.BodyText(a, 40), approvals.HeadersText(a, 40)
				}
				if body == "" {
					body = "-"
				}
				if headers == "" {
					headers = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Session,
					shortDuration(now.Sub(a.Created)), shortDuration(a.Deadline.Sub(now)),
					printable(a.Method), printable(a.Host), path, rule, fix, headers, body)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow: print each new hold and decision")
	cmd.Flags().StringVar(&session, "session", "", "only the requests of session `ID`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (with -f: one JSON event per line)")
	cmd.Flags().BoolVar(&noTrunc, "no-trunc", false, "do not shorten paths, queries, rules, bodies and headers")
	return cmd
}

// followApprovals prints the held requests, then each hold and decision as
// it happens, one line each (fixed columns, since lines come one by one).
func (c *cli) followApprovals(cmd *cobra.Command, session string, asJSON, noTrunc bool) error {
	const row = "%-8s  %-16s  %-12s  %-6s  %-6s  %-7s  %-24s  %-32s  %s\n"
	if !asJSON {
		fmt.Fprintf(c.stdout, row, "EVENT", "ID", "SESSION", "AGE", "LEFT", "METHOD", "HOST", "PATH", "RULE / DECISION")
	}
	err := c.client().FollowApprovals(cmd.Context(), session, func(ev api.ApprovalEvent) error {
		if asJSON {
			return c.printJSONLine(ev)
		}
		if ev.Type == api.ApprovalDropped {
			c.warn("%d approval events were not received here (this client read too slowly); airlock approvals lists what is held now", ev.Dropped)
			return nil
		}
		if ev.Approval == nil {
			return nil
		}
		a := ev.Approval
		now := c.now()
		event, left, last := api.ApprovalHeld, shortDuration(a.Deadline.Sub(now)), printable(a.Rule)
		if ev.Type == api.ApprovalDecided {
			event, left, last = a.State, "-", "by "+printable(a.By)
			if a.Reason != "" {
				last += ": " + printable(a.Reason)
			}
		}
		host, path := printable(a.Host), approvals.PathText(*a)
		if !noTrunc {
			host, path, last = truncate(host, 24), truncate(path, 32), truncate(last, 60)
		}
		fmt.Fprintf(c.stdout, row, event, a.ID, a.Session, shortDuration(now.Sub(a.Created)), left, printable(a.Method), host, path, last)
		if ev.Type == api.ApprovalHeld {
			n := 120
			if noTrunc {
				n = -1
			}
			if headers := approvals.HeadersText(*a, n); headers != "" {
				fmt.Fprintf(c.stdout, "%-8s  headers: %s\n", "", headers)
			}
			if body := approvals.BodyText(*a, n); body != "" {
				fmt.Fprintf(c.stdout, "%-8s  body: %s\n", "", body)
			}
			if a.Repair != nil {
				fmt.Fprintf(c.stdout, "%-8s  repair: %s\n", "", repairText(a.Repair))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return errors.New("airlockd ended the approvals stream (is it stopping?)")
}

func (c *cli) newApproveCommand() *cobra.Command {
	return c.newDecideCommand(api.DecisionAllow, "approve", "Allow a request held for approval",
		`Approve lets a held request (see airlock approvals) go on to its
destination, and prints its id. The decision is audited in the session's
log in your name (the user the daemon's socket sees) with the reason.

With --revise it approves by a revision instead of once: the request's
repair (REPAIR in airlock approvals: an allow rule for its method and
path, before the rule that asked), computed again against the session's
policy as it is now, revises the session's policy as airlock update does,
and the request goes on under the new version, as every later request like
it does without being held. It prints the id, then the new policy version
and the change. The revision's audit event (layer policy, action revised)
names the approval and you. A repair a running session cannot take is
refused with the reason, and nothing changes: the request stays held. A
request the policy allows already (revised since it was held) is allowed.`,
		`  airlock approve 5e0c1b7a9d3f2e41
  airlock approve --reason "release ticket 4812" 5e0c1b7a9d3f2e41
  airlock approve --revise 5e0c1b7a9d3f2e41`)
}

func (c *cli) newDenyCommand() *cobra.Command {
	return c.newDecideCommand(api.DecisionDeny, "deny", "Refuse a request held for approval",
		`Deny refuses a held request (see airlock approvals) and prints its id. The
client gets 403 with a JSON body naming the rule, and the reason. The
decision is audited in the session's log in your name (the user the
daemon's socket sees).`,
		`  airlock deny 5e0c1b7a9d3f2e41
  airlock deny --reason "wrong service: meant auth, not billing" 5e0c1b7a9d3f2e41`)
}

func (c *cli) newDecideCommand(decision, use, short, long, example string) *cobra.Command {
	var reason string
	var revise bool
	cmd := &cobra.Command{
		Use:     use + " [flags] ID",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1, "one approval ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			a, err := c.client().DecideApproval(cmd.Context(), args[0], api.ApprovalDecision{Decision: decision, Reason: reason, Revise: revise})
			if err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, a.ID)
			if a.RevisedTo > 0 && a.Repair != nil {
				fmt.Fprintf(c.stdout, "policy version %d: %s\n", a.RevisedTo, printable(a.Repair.Summary()))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit and the client (at most 1024 bytes)")
	if decision == api.DecisionAllow {
		cmd.Flags().BoolVar(&revise, "revise", false, "approve by revising the session's policy with the request's repair, so that requests like it are allowed from now on")
	}
	return cmd
}

// repairText is a held request's repair in one line: its changes, or why
// there is none, and why a running session cannot take it; "-" without.
func repairText(r *policies.Repair) string {
	switch {
	case r == nil:
		return "-"
	case r.Allowed:
		return "(allowed by the policy now)"
	case len(r.Changes) == 0:
		return printable("(none: " + r.Reason + ")")
	case !r.Revisable:
		return printable(r.Summary() + " (not revisable: " + r.Reason + ")")
	}
	return printable(r.Summary())
}

// shortDuration renders d to the second: "12s", "4m05s", "1h02m"; a
// negative d is "0s".
func shortDuration(d time.Duration) string {
	s := int64(max(d, 0).Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// printable replaces what is not a printable character, which a
// request's path or a reason could carry to the terminal, by "?":
// control characters, and format characters such as bidi overrides
// (U+202E) and zero-width ones, which a path may hold percent-encoded
// and which would make it read as another.
func printable(s string) string {
	notPrint := func(r rune) bool { return !unicode.IsPrint(r) }
	if strings.IndexFunc(s, notPrint) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if notPrint(r) {
			return '?'
		}
		return r
	}, s)
}
