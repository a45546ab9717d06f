package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
)

func (c *cli) newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [flags]",
		Short: "Print the client's and the daemon's versions",
		Example: `  airlock version
  airlock version --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			v, err := c.client().Version(cmd.Context())
			if asJSON {
				out := struct {
					Client struct {
						Version string `json:"version"`
					} `json:"client"`
					Server *api.Version `json:"server,omitempty"`
				}{Server: v}
				out.Client.Version = clientVersion()
				if perr := c.printJSON(out); perr != nil {
					return perr
				}
				return err
			}
			fmt.Fprintf(c.stdout, "Client: %s\n", clientVersion())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "Server: %s (containerd %s, root %s)\n", v.Version, v.Containerd, v.Root)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
