// The loader's request ids (edge/cmd/worker/requestid.mjs), in plain Node: 2^31 requests to reach
// the wrap through the Worker are out of reach, so the choice is tested on its own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { nextRequestId } from "../cmd/worker/requestid.mjs";

const MAX = 2147483647;
const MIN = -2147483648;

test("ids count up from the last one", () => {
  assert.equal(nextRequestId(0, new Map()), 1);
  assert.equal(nextRequestId(41, new Set()), 42);
  assert.equal(nextRequestId(-1, new Set()), 0);
});

test("ids wrap from 2147483647 to -2147483648", () => {
  assert.equal(nextRequestId(MAX, new Map()), MIN);
  assert.equal(nextRequestId(MAX - 1, new Map()), MAX);
  assert.equal(nextRequestId(MIN, new Map()), MIN + 1);
});

test("ids still in use are skipped, a Map's keys as a Set's values", () => {
  assert.equal(nextRequestId(5, new Set([6, 7, 9])), 8);
  assert.equal(nextRequestId(0, new Map([[1, {}], [2, {}]])), 3);
  // The last id given may itself still be in use; only those after it count.
  assert.equal(nextRequestId(5, new Set([5, 6])), 7);
});

test("ids in use are skipped across the wrap", () => {
  assert.equal(nextRequestId(MAX, new Set([MIN, MIN + 1])), MIN + 2);
  assert.equal(nextRequestId(MAX - 2, new Map([[MAX - 1, {}], [MAX, {}], [MIN, {}]])), MIN + 1);
  // Long-lived requests of the first round are still skipped in the next one.
  assert.equal(nextRequestId(MIN + 2, new Set([1, 2, MIN + 3])), MIN + 4);
  assert.equal(nextRequestId(0, new Set([1, 2, MIN + 3])), 3);
});
