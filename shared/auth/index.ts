export * from './authenticator.js';
export * from './keys.js';
export * from './keyStore.js';
export * from './sessionTokens.js';
export * from './fromConfig.js';
