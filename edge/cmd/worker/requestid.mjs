// The loader's choice of request ids, apart so that node --test can import it (loader.mjs imports
// what only the Worker has: ./app.wasm, cloudflare:sockets). `make worker` copies it beside index.mjs.

/**
 * The id after last for a new request: an int32, as Go's edgehookServe takes it, wrapping from
 * 2147483647 to -2147483648 and skipping the ids inUse (a Map or Set) holds — requests not yet
 * answered. Far fewer than 2^32 requests are ever in flight, so one id is always free.
 */
export function nextRequestId(last, inUse) {
  let id = last;
  do id = (id + 1) | 0;
  while (inUse.has(id));
  return id;
}
