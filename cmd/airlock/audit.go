package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
)

func (c *cli) newAuditCommand() *cobra.Command {
	var asJSON bool
	var layer string
	cmd := &cobra.Command{
		Use:   "audit [flags] ID",
		Short: "Show a session's perimeter decisions",
		Long: `Audit prints what the perimeter decided for a session, in order: DNS names
allowed or refused (with the addresses pinned), connections blocked (per
destination, with packet counts), credentials minted, refreshed, revoked or
rejected by a service, and commit decisions. Credentials appear by id, never
by value. Identical DNS and connection decisions within 10s are printed once,
then once more with repeated=N and their first and last time. Past the
session's resources.audit_size (default 16MiB) the log shows "audit
truncated" and, at the end, "audit dropped" with how many events it left out.`,
		Example: `  airlock audit 3f9c2a1b
  airlock audit --layer dns 3f9c2a1b
  airlock audit --json 3f9c2a1b | jq 'select(.action == "refused")'`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "TIME\tLAYER\tACTION\tSUBJECT\tDETAIL")
			}
			// Events are printed as they arrive: --json output of a long
			// log starts at once and stays in constant memory.
			err := c.client().AuditEach(cmd.Context(), args[0], func(ev api.AuditEvent) error {
				if layer != "" && ev.Layer != layer {
					return nil
				}
				if asJSON {
					return c.printJSONLine(ev)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ev.Time.Local().Format("15:04:05.000"),
					ev.Layer, ev.Action, ev.Subject, detail(ev.Reason, ev.Fields))
				return nil
			})
			if err != nil {
				return err
			}
			if asJSON {
				return nil
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON event per line")
	cmd.Flags().StringVar(&layer, "layer", "", "only events of this layer: dns, net, l7, approval, fs, credentials, session or audit")
	return cmd
}

// detail renders an event's reason and fields as "reason; k=v k=v".
func detail(reason string, fields map[string]any) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys)+1)
	if reason != "" {
		parts = append(parts, reason+";")
	}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, fields[k]))
	}
	return strings.Join(parts, " ")
}

func (c *cli) printJSONLine(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
