package cuda

// SetNoCaptureQuery makes CaptureLaunch skip cuStreamIsCapturing (every
// launch then reads as not captured), for BenchmarkCallHost's
// -callhost.nocapture experiment; never with a capturing stream.
func SetNoCaptureQuery(on bool) { noCaptureQuery = on }
