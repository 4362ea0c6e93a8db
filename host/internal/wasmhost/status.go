package wasmhost

// status is a proxy-wasm result code (spec "Types", proxy-wasm-cpp-host WasmResult).
type status uint32

const (
	statusOK                  status = 0
	statusNotFound            status = 1
	statusBadArgument         status = 2
	statusInvalidMemoryAccess status = 6
)

// WASI errno values returned by the cpp-host WASI emulation.
const (
	errnoSuccess uint32 = 0
	errnoBadf    uint32 = 8
	errnoFault   uint32 = 21
	errnoInval   uint32 = 28
	errnoNosys   uint32 = 52
	errnoNotsup  uint32 = 58
)

// Proxy-Wasm enums used by the host (spec "Types").
const (
	mapTypeRequestHeaders          = 0
	mapTypeHTTPCallResponseHeaders = 6
	mapTypeHTTPCallResponseTrailer = 7
	mapTypeLast                    = 7
	bufferTypeRequestBody          = 0
	bufferTypeHTTPCallResponseBody = 4
	bufferTypeVMConfig             = 6
	bufferTypePluginConfig         = 7
	streamTypeRequest              = 0
	streamTypeResponse             = 1
	actionContinue                 = 0
	actionPause                    = 1
	logLevelCritical               = 5
)
