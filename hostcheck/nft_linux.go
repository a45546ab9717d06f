package hostcheck

import "github.com/google/nftables"

// listNftTables lists the nftables tables of the host's network namespace
// over a fresh netlink connection and returns how many there are.
func listNftTables() (int, error) {
	c, err := nftables.New()
	if err != nil {
		return 0, err
	}
	defer c.CloseLasting()
	tables, err := c.ListTables()
	if err != nil {
		return 0, err
	}
	return len(tables), nil
}
