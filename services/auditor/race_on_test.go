//go:build race

package auditor

// raceOn: the race detector drops a quarter of sync.Pool's items on purpose.
const raceOn = true
