package httpapi

// SetAfterBind sets the hook Listen calls right after it binds a socket.
func SetAfterBind(f func(path string)) { afterBind = f }
