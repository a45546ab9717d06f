package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (c *cli) newPoolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool COMMAND",
		Short: "Show the daemon's warm pools",
		Long: `A manifest with a "pool { size = N }" block (or airlockd --pool FILE) makes
airlockd keep N sandboxes of that policy prepared: container, workspace
mounts, network namespace and rules, credential directories, with an init
waiting for the command. A session with the same policy (everything but
command and timeout equal) takes one and starts in milliseconds; each
prepared sandbox serves exactly one session and is never reused.`,
		Example: `  airlock pool ls
  airlock pool rm 3f9c0e1a2b4d5e6f`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(c.newPoolLsCommand(), c.newPoolRmCommand())
	return cmd
}

func (c *cli) newPoolLsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [flags]",
		Short: "List warm pools: size, ready sandboxes, hits and misses",
		Example: `  airlock pool ls
  airlock pool ls --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			pools, err := c.client().ListPools(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(nonNil(pools))
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tLABEL\tIMAGE\tREADY\tSIZE\tHITS\tMISSES\tDISCARDED\tLAST ERROR")
			for _, p := range pools {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Key, p.Label, p.Image, p.Ready, p.Size, p.Hits, p.Misses, p.Discarded, p.LastError)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the pools as a JSON array")
	return cmd
}

func (c *cli) newPoolRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm KEY",
		Short: "Stop a warm pool and remove its prepared sandboxes",
		Long: `rm stops preparing sandboxes for the pool KEY (see airlock pool ls) and
removes the ones waiting. Sessions that already took a sandbox go on. A
later session whose manifest has a pool block declares the pool again.`,
		Example: `  airlock pool rm 3f9c0e1a2b4d5e6f`,
		Args:    exactArgs(1, "one pool KEY"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := c.client().RemovePool(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, args[0])
			return nil
		}),
	}
}
