//go:build !unix

package dnsproxy

import "errors"

// fdExchange says whether upstream UDP exchanges use the socket's
// descriptor directly (exchangeFD): not here.
const fdExchange = false

func fdRead(uintptr, []byte) (int, error)  { return 0, errors.ErrUnsupported }
func fdWrite(uintptr, []byte) (int, error) { return 0, errors.ErrUnsupported }
