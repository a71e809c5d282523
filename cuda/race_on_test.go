//go:build race

package cuda

// raceEnabled: the race detector is on (tests that run a racy schedule on
// purpose skip that part).
const raceEnabled = true
