//go:build !race

package auditor

const raceOn = false
