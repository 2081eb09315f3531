package api

// EmitResultJSON exposes emitResultJSON to the external tests.
var EmitResultJSON = emitResultJSON
