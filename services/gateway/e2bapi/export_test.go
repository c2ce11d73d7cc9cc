package e2bapi

// FilesActive is the number of /files requests holding a transfer slot
// or waiting for one.
func FilesActive(a *API) int64 { return a.filesActive.Load() }
