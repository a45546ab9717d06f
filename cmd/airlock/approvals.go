package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
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

BODY is the start of the request's body (the gateway shows at most 64 KiB
of it), as the sandbox sent it: text with its control characters escaped
(\n, \x1b, \u202e), cut to fit unless --no-trunc; anything else as its
size, "binary" and its Content-Type; a compressed body as its size and
encoding (unless it is text: then the text, after a note that it was
declared encoded, since a service that ignores the header reads it). A JSON body with a key twice in one object (in any case) starts
with a note naming it: the service acts on one of them, which may not be
the one shown before the cut. --json gives the bytes themselves (base64).

With -f the list is followed: one line per new hold and per decision (who
decided, and why), until interrupted. A follower too slow to keep up is
told how many events it missed.`,
		Example: `  airlock approvals
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
			fmt.Fprintln(tw, "ID\tSESSION\tAGE\tLEFT\tMETHOD\tHOST\tPATH\tRULE\tBODY")
			now := c.now()
			for _, a := range list {
				path, rule, body := printable(a.Path), printable(a.Rule), bodyText(a, -1)
				if !noTrunc {
					path, rule, body = truncate(path, 48), truncate(rule, 40), bodyText(a, 40)
				}
				if body == "" {
					body = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Session,
					shortDuration(now.Sub(a.Created)), shortDuration(a.Deadline.Sub(now)),
					printable(a.Method), printable(a.Host), path, rule, body)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow: print each new hold and decision")
	cmd.Flags().StringVar(&session, "session", "", "only the requests of session `ID`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (with -f: one JSON event per line)")
	cmd.Flags().BoolVar(&noTrunc, "no-trunc", false, "do not shorten paths and rules")
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
		host, path := printable(a.Host), printable(a.Path)
		if !noTrunc {
			host, path, last = truncate(host, 24), truncate(path, 32), truncate(last, 60)
		}
		fmt.Fprintf(c.stdout, row, event, a.ID, a.Session, shortDuration(now.Sub(a.Created)), left, printable(a.Method), host, path, last)
		if ev.Type == api.ApprovalHeld {
			n := 120
			if noTrunc {
				n = -1
			}
			if body := bodyText(*a, n); body != "" {
				fmt.Fprintf(c.stdout, "%-8s  body: %s\n", "", body)
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
log in your name (the user the daemon's socket sees) with the reason.`,
		`  airlock approve 5e0c1b7a9d3f2e41
  airlock approve --reason "release ticket 4812" 5e0c1b7a9d3f2e41`)
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
	cmd := &cobra.Command{
		Use:     use + " [flags] ID",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1, "one approval ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			a, err := c.client().DecideApproval(cmd.Context(), args[0], api.ApprovalDecision{Decision: decision, Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, a.ID)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit and the client (at most 1024 bytes)")
	return cmd
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

// bodyText renders a held request's body for a terminal, "" when it has
// none. The sandbox chose every byte of it, so nothing of it reaches the
// terminal raw: text (valid UTF-8 without NUL) is shown with every
// character that is not printable escaped (control characters, C1
// controls, Unicode format characters such as bidi overrides) and
// backslashes doubled, cut to at most n characters (n < 0: uncut) with
// a note of its size; a body in a Content-Encoding other than identity
// that is not text, or any other bytes, is shown as its size and what it
// is. Notes first: a Content-Encoding the text does not have, a JSON key
// twice in one object.
func bodyText(a api.Approval, n int) string {
	if len(a.Body) == 0 {
		return ""
	}
	size := fmt.Sprintf("%d bytes", len(a.Body))
	if a.BodyTruncated {
		size = fmt.Sprintf("more than %d bytes", len(a.Body))
	}
	ct := "none"
	if a.ContentType != "" {
		ct = truncate(escapeText(a.ContentType), 64)
	}
	b := a.Body
	if a.BodyTruncated {
		// The cut may fall inside a character.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	isText := utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
	note := ""
	if ce := strings.TrimSpace(a.ContentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		ce = truncate(escapeText(ce), 32)
		if !isText {
			return fmt.Sprintf("(%s, %s-encoded, content-type %s)", size, ce, ct)
		}
		// Compressed data is not text: a service that ignores the header
		// (Go's net/http does not decode request bodies) reads this.
		note = "(declared " + ce + "-encoded, but it is text) "
	}
	if !isText {
		return fmt.Sprintf("(%s, binary, content-type %s)", size, ct)
	}
	// A key twice in one object: the service reads one of them (Go's
	// encoding/json the last, case-insensitively), which may not be the
	// one a person reads first, or sees before the cut.
	if k, ok := duplicateKey(b); ok {
		note += "(duplicate key \"" + truncate(escapeText(k), 32) + "\": a service may act on either) "
	}
	text := escapeText(string(b))
	if n >= 0 && utf8.RuneCountInString(text) > n {
		// Cut at an escape's start, never inside one.
		var out strings.Builder
		w := 0
		for _, r := range string(b) {
			e := escapeText(string(r))
			if w += utf8.RuneCountInString(e); w > n {
				break
			}
			out.WriteString(e)
		}
		return note + out.String() + "… (" + size + ", cut)"
	}
	if a.BodyTruncated {
		return note + text + "… (" + size + ", cut)"
	}
	return note + text
}

// duplicateKey reports the first key of b, read as JSON, that an object
// holds twice, compared as Go's encoding/json matches keys to fields
// (without regard to case, under Unicode folding: "nameſ" is "names"),
// as far as b reads as JSON.
func duplicateKey(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	// One set of keys per open object; nil for an open array. An
	// object's next string token is a key when expectKey is true.
	var stack []map[string]bool
	var expectKey []bool
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true // the object's value ends
			}
			switch t {
			case '{':
				stack, expectKey = append(stack, map[string]bool{}), append(expectKey, true)
			case '[':
				stack, expectKey = append(stack, nil), append(expectKey, false)
			default:
				stack, expectKey = stack[:top], expectKey[:top]
				if top-1 >= 0 && stack[top-1] != nil {
					expectKey[top-1] = true
				}
			}
		case string:
			if top >= 0 && stack[top] != nil && expectKey[top] {
				f := strings.ToUpper(strings.ToLower(t))
				if stack[top][f] {
					return t, true
				}
				stack[top][f], expectKey[top] = true, false
				continue
			}
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true
			}
		default:
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true
			}
		}
	}
}

// escapeText escapes what in s is not a printable character (see
// bodyText): \n, \r and \t by name, other ASCII as \xNN, the rest as
// \uNNNN or \UNNNNNNNN; a backslash is doubled, so that an escape in the
// text cannot pass for one of these.
func escapeText(s string) string {
	var out strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			out.WriteString(`\\`)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r == utf8.RuneError:
			out.WriteString(`\ufffd`)
		case unicode.IsPrint(r):
			out.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&out, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			fmt.Fprintf(&out, `\U%08x`, r)
		}
	}
	return out.String()
}
