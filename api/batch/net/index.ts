export { AddressPolicy, isPublicAddress, isIpLiteral } from './address.js';
export {
  OutboundClient,
  OutboundError,
  type OutboundErrorCode,
  type OutboundOptions,
  type OutboundResponse,
} from './fetch.js';
