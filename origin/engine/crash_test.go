package engine

const crashChildEnv = "EDGEHOOK_CRASH_CHILD_DB"

func runCrashChild() int { return 0 }
