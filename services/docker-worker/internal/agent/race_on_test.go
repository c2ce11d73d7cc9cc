//go:build race

package agent

// raceOn: the race detector drops a quarter of sync.Pool's items on purpose.
const raceOn = true
