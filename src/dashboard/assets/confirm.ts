/** The confirmation every change asks for, in index.html's dialog. */
import { byId } from './dom.js';

const dialog = byId('confirm', HTMLDialogElement);
const text = byId('confirm-text', HTMLElement);
const ok = byId('confirm-ok', HTMLButtonElement);
const cancel = byId('confirm-cancel', HTMLButtonElement);

/** Asks before a change; resolves true when the person confirmed. Focus goes back where it was. */
export function confirmed(question: string): Promise<boolean> {
  text.textContent = question;
  const back = document.activeElement;
  return new Promise((resolve) => {
    const done = (answer: boolean) => {
      dialog.close();
      ok.removeEventListener('click', yes);
      cancel.removeEventListener('click', no);
      if (back instanceof HTMLElement) back.focus();
      resolve(answer);
    };
    const yes = () => done(true);
    const no = () => done(false);
    ok.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('cancel', no, { once: true });
    dialog.showModal();
    cancel.focus();
  });
}
